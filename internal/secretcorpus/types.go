package secretcorpus

import (
	"strings"
)

// secretType is a kind of secret and the ways it is written down.
type secretType struct {
	name  string   // the label
	kind  string   // Secrets.Make's kind
	vars  []string // the variables it is assigned to
	named bool     // only the name next to it says it is a secret
	curl  string   // how a curl line sends it: bearer, token, user (-u V:), pass (-u admin:V), header:<name>, query, self (V is the URL)
	url   string   // how a URL holds it: query, userinfo, self
	host  string   // the API it is for
	wrap  string   // db: assigned inside a database URL; azure: inside a connection string (for a *_CONNECTION_STRING variable)
	pem   bool
}

// SecretTypes lists the types of secret the corpus plants.
func SecretTypes() []string {
	var out []string
	for _, t := range secretTypes() {
		out = append(out, t.name)
	}
	return out
}

func secretTypes() []secretType {
	return []secretType{
		{name: "aws-access-key-id", kind: "akia", vars: []string{"AWS_ACCESS_KEY_ID"}},
		{name: "aws-secret-access-key", kind: "awssecret", vars: []string{"AWS_SECRET_ACCESS_KEY"}, named: true},
		{name: "github-pat", kind: "ghp", vars: []string{"GITHUB_TOKEN", "GH_TOKEN"}, curl: "token", url: "userinfo", host: "api.github.com/user/repos"},
		{name: "github-fine-grained-pat", kind: "ghpat", vars: []string{"GITHUB_PAT", "GH_TOKEN"}, curl: "bearer", url: "userinfo", host: "api.github.com/repos/acme/api/actions/runs"},
		{name: "github-oauth", kind: "gho", vars: []string{"GITHUB_OAUTH_TOKEN"}, curl: "bearer", host: "api.github.com/user"},
		{name: "gitlab-pat", kind: "glpat", vars: []string{"GITLAB_TOKEN"}, curl: "header:PRIVATE-TOKEN", url: "userinfo", host: "gitlab.com/api/v4/projects"},
		{name: "slack-bot-token", kind: "xoxb", vars: []string{"SLACK_BOT_TOKEN"}, curl: "bearer", host: "slack.com/api/chat.postMessage"},
		{name: "slack-webhook", kind: "slackhook", vars: []string{"SLACK_WEBHOOK_URL"}, curl: "self"},
		{name: "stripe-secret-key", kind: "stripe", vars: []string{"STRIPE_SECRET_KEY", "STRIPE_API_KEY"}, curl: "user", host: "api.stripe.com/v1/charges"},
		{name: "stripe-restricted-key", kind: "stripe-rk", vars: []string{"STRIPE_RESTRICTED_KEY"}, curl: "user", host: "api.stripe.com/v1/customers"},
		{name: "openai-api-key", kind: "openai", vars: []string{"OPENAI_API_KEY"}, curl: "bearer", host: "api.openai.com/v1/models"},
		{name: "anthropic-api-key", kind: "anthropic", vars: []string{"ANTHROPIC_API_KEY"}, curl: "header:x-api-key", host: "api.anthropic.com/v1/models"},
		{name: "gcp-api-key", kind: "aiza", vars: []string{"GOOGLE_API_KEY", "GEMINI_API_KEY"}, curl: "query", url: "query", host: "maps.googleapis.com/maps/api/geocode/json"},
		{name: "jwt", kind: "jwt", vars: []string{"AUTH_TOKEN", "ACCESS_TOKEN"}, curl: "bearer", host: "api.acme.dev/v1/me"},
		{name: "npm-token", kind: "npm", vars: []string{"NPM_TOKEN"}, curl: "bearer", host: "registry.npmjs.org/-/whoami"},
		{name: "sendgrid-api-key", kind: "sendgrid", vars: []string{"SENDGRID_API_KEY"}, curl: "bearer", host: "api.sendgrid.com/v3/mail/send"},
		{name: "twilio-api-key", kind: "twilio", vars: []string{"TWILIO_API_KEY"}, curl: "user", host: "api.twilio.com/2010-04-01/Accounts.json"},
		{name: "huggingface-token", kind: "hf", vars: []string{"HF_TOKEN"}, curl: "bearer", host: "huggingface.co/api/whoami-v2"},
		{name: "digitalocean-token", kind: "dop", vars: []string{"DIGITALOCEAN_TOKEN"}, curl: "bearer", host: "api.digitalocean.com/v2/droplets"},
		{name: "shopify-token", kind: "shpat", vars: []string{"SHOPIFY_ACCESS_TOKEN"}, curl: "header:X-Shopify-Access-Token", host: "acme.myshopify.com/admin/api/2024-10/products.json"},
		{name: "linear-api-key", kind: "linear", vars: []string{"LINEAR_API_KEY"}, curl: "header:Authorization", host: "api.linear.app/graphql"},
		{name: "pypi-token", kind: "pypi", vars: []string{"TWINE_PASSWORD", "PYPI_TOKEN"}},
		{name: "age-secret-key", kind: "age", vars: []string{"SOPS_AGE_KEY"}},
		{name: "doppler-token", kind: "doppler", vars: []string{"DOPPLER_TOKEN"}, curl: "bearer", host: "api.doppler.com/v3/configs/config/secrets"},
		{name: "databricks-token", kind: "databricks", vars: []string{"DATABRICKS_TOKEN"}, curl: "bearer", host: "acme.cloud.databricks.com/api/2.0/clusters/list"},
		{name: "grafana-token", kind: "glsa", vars: []string{"GRAFANA_SERVICE_ACCOUNT_TOKEN"}, curl: "bearer", host: "grafana.acme.dev/api/dashboards/uid/api"},
		{name: "vault-token", kind: "hvs", vars: []string{"VAULT_TOKEN"}, curl: "header:X-Vault-Token", host: "vault.acme.internal:8200/v1/secret/data/api"},
		{name: "perplexity-api-key", kind: "pplx", vars: []string{"PERPLEXITY_API_KEY"}, curl: "bearer", host: "api.perplexity.ai/chat/completions"},
		{name: "postman-api-key", kind: "pmak", vars: []string{"POSTMAN_API_KEY"}, curl: "header:X-Api-Key", host: "api.getpostman.com/collections"},
		{name: "pulumi-token", kind: "pulumi", vars: []string{"PULUMI_ACCESS_TOKEN"}, curl: "token", host: "api.pulumi.com/api/user"},
		{name: "sentry-token", kind: "sentry", vars: []string{"SENTRY_AUTH_TOKEN"}, curl: "bearer", host: "sentry.io/api/0/projects/"},
		{name: "heroku-api-key", kind: "heroku", vars: []string{"HEROKU_API_KEY"}, curl: "bearer", host: "api.heroku.com/apps"},
		{name: "planetscale-token", kind: "pscale", vars: []string{"PLANETSCALE_SERVICE_TOKEN"}},
		{name: "db-url-password", kind: "dbpass", vars: []string{"DATABASE_URL", "POSTGRES_URL", "REDIS_URL", "MONGODB_URI"}, named: true, wrap: "db", url: "self"},
		{name: "env-secret", kind: "envval", vars: []string{"SESSION_SECRET", "JWT_SECRET", "APP_SECRET_KEY", "ENCRYPTION_KEY", "WEBHOOK_SECRET"}, named: true},
		{name: "password", kind: "password-symbols", vars: []string{"ADMIN_PASSWORD", "DB_PASSWORD", "SMTP_PASSWORD", "REDIS_PASSWORD", "GRAFANA_ADMIN_PASSWORD"}, named: true, curl: "pass", url: "userinfo", host: "grafana.acme.internal/api/health"},
		{name: "generic-api-key", kind: "generic", vars: []string{"API_KEY", "SERVICE_API_KEY", "INTERNAL_API_TOKEN", "PARTNER_API_SECRET"}, named: true, curl: "header:X-API-Key", url: "query", host: "api.partner.example.net/v2/orders"},
		{name: "azure-storage-key", kind: "azure-storage", vars: []string{"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY"}, named: true, wrap: "azure"},
		{name: "private-key-rsa", kind: "pem-rsa", pem: true},
		{name: "private-key-rsa-4096", kind: "pem-rsa-4096", pem: true},
		{name: "private-key-ec", kind: "pem-ec", pem: true},
		{name: "private-key-ed25519", kind: "pem-ed25519", pem: true},
		{name: "private-key-openssh", kind: "pem-openssh", pem: true},
		{name: "gcp-service-account-key", kind: "gcpsa", pem: true},
	}
}

func (t secretType) isAWS() bool { return strings.HasPrefix(t.name, "aws-") }

// Locations lists where in a conversation secrets are planted.
func Locations() []string {
	return []string{"system", "user", "assistant", "quote", "summary", "tool-input", "tool-output", "file-view", "nested-json"}
}

// Layouts lists the layouts of the text around a planted secret.
func Layouts() []string {
	return []string{
		"env", "ini", "yaml", "toml", "k8s-env", "k8s-secret", "k8s-secret-data", "json", "code",
		"pem-file", "k8s-tls", "yaml-block", "env-escaped", "json-escaped", "gcp-sa-json",
		"aws-cli-json", "az-keys-json", "kubectl-json",
		"curl", "url", "shell", "shell-history", "prose", "bare",
	}
}

// fileLayouts are the layouts of a file holding a secret of type t; json
// says whether to include JSON files.
func fileLayouts(t secretType, json bool) []string {
	var out []string
	switch {
	case t.kind == "gcpsa":
		if json {
			out = append(out, "gcp-sa-json")
		}
	case t.pem:
		out = append(out, "pem-file", "k8s-tls", "yaml-block", "env-escaped")
		if json {
			out = append(out, "json-escaped")
		}
	default:
		out = append(out, "env", "yaml", "toml", "k8s-env", "k8s-secret", "k8s-secret-data", "code")
		if t.isAWS() {
			out = append(out, "ini")
		}
		if json {
			out = append(out, "json")
		}
	}
	return out
}

// jsonLayouts are the JSON texts (files, command output) that hold t.
func jsonLayouts(t secretType) []string {
	switch {
	case t.kind == "gcpsa":
		return []string{"gcp-sa-json"}
	case t.pem:
		return []string{"json-escaped"}
	case t.isAWS():
		return []string{"aws-cli-json", "aws-cli-json", "json", "kubectl-json"}
	case t.wrap == "azure":
		return []string{"az-keys-json", "az-keys-json", "json", "kubectl-json"}
	}
	return []string{"json", "kubectl-json"}
}

// commandLayouts are the command lines that hold t.
func commandLayouts(t secretType) []string {
	if t.pem {
		return nil
	}
	out := []string{"shell"}
	if t.curl != "" {
		out = append(out, "curl")
	}
	if t.url != "" {
		out = append(out, "url")
	}
	return out
}

// Names of a variable (UPPER_SNAKE, as a .env file has it) in other
// syntaxes.
func snakeName(v string) string { return strings.ToLower(v) }

func kebabName(v string) string { return strings.ReplaceAll(strings.ToLower(v), "_", "-") }

func camelName(v string) string {
	parts := strings.Split(strings.ToLower(v), "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

func pascalName(v string) string {
	c := camelName(v)
	if c == "" {
		return c
	}
	return strings.ToUpper(c[:1]) + c[1:]
}

// plainValue says whether v can be written unquoted in YAML, a .env file
// or a shell.
func plainValue(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(isAlnum(c) || strings.IndexByte("_./:@+=-", c) >= 0) {
			return false
		}
	}
	return v != "" && v[0] != '-' && v[0] != '@'
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
