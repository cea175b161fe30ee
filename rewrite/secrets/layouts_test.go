package secrets

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scanCase is a text with one secret (or none) and the finding expected.
type scanCase struct {
	name   string
	text   string
	rule   string // "" expects no finding
	secret string // what the finding must span exactly
}

func runScanCases(t *testing.T, s *Scanner, tests []scanCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []found
			if tt.rule != "" {
				want = []found{at(tt.rule, tt.text, tt.secret)}
			}
			if diff := cmp.Diff(want, spans(s.ScanString(tt.text))); diff != "" {
				t.Errorf("ScanString (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPrivateKeyLayouts: a private key is found whole, BEGIN to END, in
// every layout agents' tools show it, at any length.
func TestPrivateKeyLayouts(t *testing.T) {
	s := newTestScanner(t)
	g := newSecretGen(t, 26)
	keys := map[string]string{
		"rsa2048": g.make("pem-rsa"),
		"rsa4096": g.make("pem-rsa-4096"),
		"ec":      g.make("pem-ec"),
		"openssh": g.make("pem-openssh"),
	}
	layouts := []struct {
		name, how     string
		before, after string
		wantCutSuffix bool
	}{
		{"raw", "", "cat key.pem\n", "\n$ ", false},
		{"crlf", "crlf", "type key.pem\r\n", "\r\n", false},
		{"escaped", "escaped", `{"content": "`, `\n"}`, false},
		{"escaped twice", "escaped2", `{\"content\": \"`, `\\n\"}`, false},
		{"indented", "indent", "stringData:\n  tls.key: |\n    ", "\n  tls.crt: x\n", false},
		{"line-numbered", "lineno", "", "\n     40→\n", false},
		{"line-numbered escaped", "lineno|escaped", `{"type": "tool_result", "content": "`, `"}`, false},
		{"line-numbered escaped ascii", "lineno|escaped|ascii", `{"type": "tool_result", "content": "`, `"}`, false},
		{"line-numbered escaped twice", "lineno|escaped|escaped", `{\"content\": \"`, `\"}`, false},
		{"cat -n", "catn", "$ cat -n key.pem\n", "\n", false},
		{"cat -n escaped", "catn|escaped", `"output": "`, `\n"`, false},
		{"diff", "diff", "+++ b/key.pem\n@@ -0,0 +1,30 @@\n", "\n diff --git", false},
		{"flattened", "flat", `PRIVATE_KEY="`, `"`, false},
		{"cut", "cut", "the file ends here:\n", "\n\nthat's all", true},
		{"cut escaped", "cut|escaped", `{"content": "`, `"}`, true},
		{"cut at the end", "cut", "head -c 900 key.pem\n", "", true},
	}
	for kn, key := range keys {
		for _, l := range layouts {
			t.Run(kn+"/"+l.name, func(t *testing.T) {
				laid := key
				if l.how != "" {
					for h := range strings.SplitSeq(l.how, "|") {
						laid = layOut(laid, h)
					}
				} else {
					laid = strings.TrimSuffix(laid, "\n")
				}
				core := laid[strings.Index(laid, "-----BEGIN"):]
				if !l.wantCutSuffix {
					core = core[:strings.LastIndex(core, "PRIVATE KEY-----")+len("PRIVATE KEY-----")]
				}
				text := l.before + laid + l.after
				want := []found{at("private-key", text, core)}
				if diff := cmp.Diff(want, spans(s.ScanString(text))); diff != "" {
					t.Errorf("ScanString (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestPrivateKeyCutAtAQuote: a key cut short inside a string of JSON, read
// with the rest of its document, ends at the string's end as it would at
// the text's: its last line, however short, is the key's.
func TestPrivateKeyCutAtAQuote(t *testing.T) {
	key := `-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcw\nggSj`
	runScanCases(t, newTestScanner(t), []scanCase{
		{"escaped", `{"output": "` + key + `", "exit_code": 0}`, "private-key", key},
		{"decoded", "{\"output\": \"" + strings.ReplaceAll(key, `\n`, "\n") + "\"}", "private-key", strings.ReplaceAll(key, `\n`, "\n")},
		{"at the text's end", strings.ReplaceAll(key, `\n`, "\n"), "private-key", strings.ReplaceAll(key, `\n`, "\n")},
	})
}

func TestPrivateKeyNotKeys(t *testing.T) {
	runScanCases(t, newTestScanner(t), []scanCase{
		{"placeholder", "-----BEGIN RSA PRIVATE KEY-----\n...\n-----END RSA PRIVATE KEY-----", "", ""},
		{"docs", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC...\n-----END PRIVATE KEY-----", "", ""},
		{"numbered docs", "     3→-----BEGIN RSA PRIVATE KEY-----\n     4→MIIEpAIBAAKCAQEA...\n     5→-----END RSA PRIVATE KEY-----", "", ""},
		{"prose", "-----BEGIN PRIVATE KEY----- is the header and -----END PRIVATE KEY----- the footer", "", ""},
		{"certificate", "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2xvdWRmbGFyZSBPcmlnaW4gQ0EwHhcNMjQwMTAx\nMIIBszCCAVmgAwIBAgIUQ2xvdWRmbGFyZSBPcmlnaW4gQ0EwHhcNMjQwMTAx\n-----END CERTIFICATE-----", "", ""},
	})
}

// TestEnvLayouts: environment variables whose name says secret, in every
// layout they are set in.
func TestEnvLayouts(t *testing.T) {
	g := newSecretGen(t, 27)
	v, tok := g.make("password"), g.make("envval")
	tests := []scanCase{
		{"k8s env block", "env:\n  - name: LOG_LEVEL\n    value: info\n  - name: ADMIN_PASSWORD\n    value: \"" + v + "\"\n", idEnv, v},
		{"k8s env block unquoted", "env:\n  - name: ADMIN_PASSWORD\n    value: " + v + "\n  - name: X\n", idEnv, v},
		{"k8s env block, a dotted value", "env:\n  - name: GRAFANA_ADMIN_PASSWORD\n    value: \"KkWDS8XxuAavYhzI5Qhj.q\"\n", idEnv, "KkWDS8XxuAavYhzI5Qhj.q"},
		{"k8s env block, a reference", "env:\n  - name: GRAFANA_ADMIN_PASSWORD\n    value: config.adminPassword2\n", "", ""},
		{"k8s env json", `{"name": "DB_PASSWORD", "value": "` + v + `"}`, idEnv, v},
		{"k8s env json escaped", `{\"name\":\"DB_PASSWORD\",\"value\":\"` + v + `\"}`, idEnv, v},
		{"cloudformation", "Environment:\n  - Name: API_TOKEN\n    Value: " + v + "\n", idEnv, v},
		{"hcl", "env {\n  name  = \"DB_PASSWORD\"\n  value = \"" + v + "\"\n}", idEnv, v},
		{"docker -e", "docker run -e POSTGRES_USER=app -e POSTGRES_PASSWORD=" + v + " -p 5432:5432 postgres", idEnv, v},
		{"docker -e quoted", `docker run -e "POSTGRES_PASSWORD=` + v + `" postgres`, idEnv, v},
		{"docker --env=", "docker run --env=DB_PASSWORD=" + v + " app", idEnv, v},
		{"export and", "export API_TOKEN=" + v + " && ./deploy.sh", idEnv, v},
		{"inline before a command", "cd app; DB_PASSWORD=" + v + " npm start", idEnv, v},
		{"compose list", "    environment:\n      - MYSQL_ROOT_PASSWORD=" + v + "\n      - MYSQL_DATABASE=shop\n", idEnv, v},
		{"line-numbered", "     2→DEBUG=1\n     3→SESSION_SECRET=" + v + "\n     4→PORT=80\n", idEnv, v},
		{"cat -n", "     3\tSESSION_SECRET=" + v + "\n", idEnv, v},
		{"diff", "+SESSION_SECRET=" + v + "\n", idEnv, v},
		{"escaped lines", `APP_ENV=prod\nJWT_SECRET=` + v + `\nPORT=80\n`, idEnv, v},
		{"in a JSON command", `{"command":"export ADMIN_PASSWORD=` + tok + ` && npm run deploy"}`, idEnv, tok},
		{"zsh history", ": 1764000000:0;export API_TOKEN=" + tok + " && npm run deploy\n", idEnv, tok},
		{"bash history", "  585  export API_TOKEN=" + tok + " && npm run deploy\n", idEnv, tok},
		{"kubectl --from-literal", "kubectl create secret generic api -n prod --from-literal=API_TOKEN=" + tok, idEnv, tok},
		{"gh secret set", `gh secret set AWS_SECRET_ACCESS_KEY --body "` + v + `"`, idEnv, v},
		{"gh secret set unquoted", "gh secret set DEPLOY_TOKEN -b " + tok + " --repo acme/api", idEnv, tok},
		{"getenv default", `db_pass = os.getenv("DB_PASSWORD", "` + v + `")`, idEnv, v},
		{"environ default", `token = os.environ.get("API_TOKEN") or "` + v + `"`, idEnv, v},
		{"placeholder", "docker run -e POSTGRES_PASSWORD=$POSTGRES_PASSWORD -e API_TOKEN=${API_TOKEN} app", "", ""},
		{"k8s secret ref", "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n        name: db\n        key: password\n", "", ""},
		{"k8s value placeholder", "  - name: JWT_SECRET\n    value: \"change-me\"\n", "", ""},
		{"k8s value expansion", "  - name: API_TOKEN\n    value: \"$(VAULT_TOKEN)\"\n", "", ""},
		{"k8s not secret", "  - name: TOKEN_TTL\n    value: \"3600s-or-more\"\n", "", ""},
		{"csrf input", `<input type="hidden" name="csrf_token" value="` + g.Str(40, "0123456789abcdef") + `">`, "", ""},
		{"command substitution", "export GITHUB_TOKEN=$(gh auth token) && gh pr list", "", ""},
	}
	runScanCases(t, newTestScanner(t), tests)
}

// TestNamedLayouts: keys of config files and code, flags and query
// parameters whose name says secret.
func TestNamedLayouts(t *testing.T) {
	g := newSecretGen(t, 28)
	v, tok := g.make("password"), g.make("envval")
	slashless := g.Str(39, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") + "7"
	tests := []scanCase{
		{"yaml quoted", "database:\n  host: db\n  password: \"" + v + "\"\n", idNamed, v},
		{"yaml unquoted", "redis:\n  password: " + v + "\n  db: 0\n", idNamed, v},
		{"yaml list item", "users:\n  - password: " + v + "\n", idNamed, v},
		{"toml", "[database]\nuser = \"app\"\npassword = \"" + v + "\"\n", idEnv, v},
		{"json", `{"db": {"user": "app", "password": "` + v + `", "pool": 5}}`, idNamed, v},
		{"json escaped", `{\"username\": \"admin\", \"password\": \"` + v + `\"}`, idNamed, v},
		{"json escaped twice", `{\\\"password\\\": \\\"` + v + `\\\"}`, idNamed, v},
		{"python dict", `creds = {'user': 'app', 'api_key': '` + v + `'}`, idNamed, v},
		{"php array", `'db_password' => '` + v + `',`, idNamed, v},
		{"keyword argument", `psycopg2.connect(host="db", user="app", password="` + v + `")`, idNamed, v},
		{"js object", `const cfg = { user: "app", clientSecret: "` + v + `" };`, idNamed, v},
		{"go", `if apiKey := "` + v + `"; apiKey != "" {`, idNamed, v},
		{"js default", "export const config = {\n  webhookSecret: process.env.WEBHOOK_SECRET ?? '" + v + "',\n};", idNamed, v},
		{"js default in a file view", `     3\t  redisPassword: process.env.REDIS_PASSWORD || "` + v + `",\n`, idNamed, v},
		{"no default", "  webhookSecret: process.env.WEBHOOK_SECRET,\n", "", ""},
		{"go camelCase at a line's start", "const (\n\tazureStorageKey = \"" + v + "\"\n)\n", idEnv, v},
		{"go at a line's start", `apiKey := "` + v + `"`, idEnv, v},
		{"flag", "mysql -h db -u root --password=" + v + " shop", idNamed, v},
		{"flag with blank", "vault login --token " + v + " -method=token", idNamed, v},
		{"query", "curl 'https://api.example.com/v2/export?format=csv&access_token=" + tok + "&limit=100'", idNamed, tok},
		{"prose", "the admin password: " + v + " (rotate it)", idNamed, v},
		{"prose with words between", "- SMTP_PASSWORD for staging: `" + v + "`\n- Never push to main directly.", idNamed, v},
		{"prose, no value", "- the password for staging: ask the on-call engineer.\n", "", ""},
		{"prose, a value starting with /", "- JWT_SECRET for staging: `/" + slashless + "`\n", idNamed, "/" + slashless},
		{"paths", "session_secret: /run/secrets/session\napi_key: /etc/app/key.pem\ntoken: /tmp/TestRun8921/token\nsecret: ~/keys/k\npassword: /srv/Pass1234Word5678abcd\n", "", ""},
		{"placeholders", "password: change-me\napi_key: \"your-api-key-here\"\ntoken: \"{{ .Values.token }}\"\nsecret: ${APP_SECRET}\n" +
			"client_secret: <client-secret>\nsigning_key: xxxxxxxxxxxxxxxx\nadmin_password: \"***\"\nwebhook_secret: REPLACE_ME\n" +
			"access_token: TODO\ndb_password: example\nsmtp_password: dummy\nredis_password: test\n", "", ""},
		{"types", "interface Login { username: string; password: string; rememberMe?: boolean }", "", ""},
		{"generic types", "  token: Promise<string>;\n  apiKey: Map<string, number>\n", "", ""},
		{"schema", `{"password": {"type": "string", "minLength": 12}}`, "", ""},
		{"pydantic", "    api_key: str = Field(..., env=\"API_KEY\")\n    db_password: SecretStr\n", "", ""},
		{"names that are not secrets", `{"nextPageToken": "CiAKGjBpNDd2Nmp1aDd3ZzEy", "cache_key": "user:1234:profile", "max_tokens": 4096, "secretName": "tls-2024"}`, "", ""},
		{"a key named key", `{"key": "user:1234:v2", "value": "x"}`, "", ""},
		{"variable names", "password: DB_PASSWORD_2\ntoken: accessToken\n", "", ""},
		{"expression", `cache_key = "user:" + str(user_id)`, "", ""},
		{"code", `token = request.headers.get("Authorization")`, "", ""},
	}
	runScanCases(t, newTestScanner(t), tests)
}

// TestValueEnd: a token ends at any byte outside its alphabet, and a
// keyword assignment's value at an escaped quote, ',', '&', ')' and the
// like, in gitleaks' rules.
func TestValueEnd(t *testing.T) {
	g := newSecretGen(t, 29)
	sk, aiza, gen, sg, hvs := g.make("stripe"), g.make("aiza"), g.make("generic"), g.make("sendgrid"), g.make("hvs")
	hvsLetters := "hvs." + g.Str(30, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") + g.make("hvs")[4:69]
	tests := []scanCase{
		{"curl -u", "curl https://api.stripe.com/v1/charges -u " + sk + ": -d amount=2000", "stripe-access-token", sk},
		{"url query", "https://maps.googleapis.com/maps/api/geocode/json?address=Berlin&key=" + aiza + "&language=en", "gcp-api-key", aiza},
		{"escaped quote", `{\"stripe_key\": \"` + sk + `\"}`, "stripe-access-token", sk},
		{"closing paren", "stripe.Client(" + sk + ")", "stripe-access-token", sk},
		{"comma", "keys = [" + aiza + ", other]", "gcp-api-key", aiza},
		{"generic before &", "GET /v1/data?format=json&api_key=" + gen + "&page=2", "generic-api-key", gen},
		{"generic before escaped quote", `{\"cmd\": \"deploy --api_key=` + gen + `\"}`, "generic-api-key", gen},
		{"generic before comma", "{api_key: " + gen + ", region: eu}", "generic-api-key", gen},
		{"generic before paren", "login(api_key=" + gen + ")", "generic-api-key", gen},
		{"sentence end", "here is the key I'm using: " + sg + ". Don't commit it.", "sendgrid-api-token", sg},
		{"sentence end after a dot alphabet", "the token is " + hvs + ".", "vault-service-token", hvs},
		{"vault token of letters first", "VAULT_ADDR=x vault read -token=" + hvsLetters + " secret/api", "vault-service-token", hvsLetters},
		{"legacy vault token of letters only", "s." + g.Str(24, "abcdefghijklmnopqrstuvwxyz") + " is a word", "", ""},
		{"generic placeholder", `secret = "dummy0123456789abc"`, "", ""},
		{"longer token", "sk_" + "live_" + g.Str(120, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") + " is too long", "", ""},
	}
	s, err := NewScanner(Options{AllowRules: []string{idEnv, idNamed}})
	if err != nil {
		t.Fatal(err)
	}
	runScanCases(t, s, tests)
}

// TestAWSNearKeyID: a documentation key id triggers nothing, and a value
// in another JSON item is not the key id's secret.
func TestAWSNearKeyID(t *testing.T) {
	g := newSecretGen(t, 30)
	id, key := g.make("akia"), g.make("awssecret")
	other := "Zk9xR2vT7yQ1mN4pL8sW3cJ6hB0dF5gK9aE2uI7o"
	sameItem := `{"AccessKeyId": "` + id + `", "SecretAccessKey": "` + key + `"}`
	tests := []struct {
		name string
		text string
		want func(string) []found
	}{
		{"doc key id", `[{"AccessKeyId": "AKIAIOSFODNN7EXAMPLE"}, {"etag": "` + other + `"}]`, nil},
		{"doc key id in prose", "AKIAIOSFODNN7EXAMPLE\n" + other, nil},
		{"other item", `[{"AccessKeyId": "` + id + `", "Status": "Active"}, {"Checksum": "` + other + `"}]`, func(x string) []found {
			return []found{at("aws-access-token", x, id)}
		}},
		{"other item before", `[{"Checksum": "` + other + `"}, {"AccessKeyId": "` + id + `"}]`, func(x string) []found {
			return []found{at("aws-access-token", x, id)}
		}},
		{"named in prose", "- AWS_SECRET_ACCESS_KEY for staging: `/" + key[1:] + "`\n", func(x string) []found {
			return []found{at("aws-secret-access-key", x, "/"+key[1:])}
		}},
		{"same item", sameItem, func(x string) []found {
			return []found{at("aws-access-token", x, id), at("aws-secret-access-key", x, key)}
		}},
	}
	s := newTestScanner(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []found
			if tt.want != nil {
				want = tt.want(tt.text)
			}
			if diff := cmp.Diff(want, spans(s.ScanString(tt.text))); diff != "" {
				t.Errorf("ScanString (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBasicAuth: a password given with its user, to curl or in a URL.
// gitleaks' curl-auth-user, which takes user and password together when
// the password has no symbols, is replaced by ours.
func TestBasicAuth(t *testing.T) {
	g := newSecretGen(t, 32)
	v, tok := g.make("password"), g.make("envval")
	sk := "sk_test_" + g.Str(24, "abcdefghijklmnopqrstuvwxyz0123456789")
	s, err := NewScanner(Options{})
	if err != nil {
		t.Fatal(err)
	}
	runScanCases(t, s, []scanCase{
		{"curl -u", "curl -fsS -u admin:" + tok + " https://grafana.acme.internal/api/health", idBasicAuth, tok},
		{"curl -u quoted", `curl -u "admin:` + v + `" https://grafana.acme.internal/api/health`, idBasicAuth, v},
		{"curl -u, a short dotted password", "curl -fsS -u admin:tkmXe33errUj.fq https://grafana.acme.internal/api/health", idBasicAuth, "tkmXe33errUj.fq"},
		{"curl -u, a dotted password", "curl -fsS -u admin:gddpg.A_XgrWNrY9_7kI https://grafana.acme.internal/api/health", idBasicAuth, "gddpg.A_XgrWNrY9_7kI"},
		{"curl -u, a reference", "curl -fsS -u admin:settings.grafanaPassword https://grafana.acme.internal/api/health", "", ""},
		{"curl --user=", "curl --user=ci:" + tok + " https://ci.acme.internal", idBasicAuth, tok},
		{"history", "  585  curl -fsS -u admin:" + tok + " https://grafana.acme.internal/api/health\n  586  vim .env\n", idBasicAuth, tok},
		{"url", "wget -qO- https://admin:" + tok + "@grafana.acme.internal/api/health", idBasicAuth, tok},
		{"url with symbols", "wget -qO- 'https://admin:" + v + "@grafana.acme.internal/api/health'", idBasicAuth, v},
		{"url with unescaped symbols", "wget -qO- https://admin:z6@aOP<KSd&q>x@grafana.acme.internal/api/health", idBasicAuth, "z6@aOP<KSd&q>x"},
		{"amqp url", "BROKER=amqp://app:" + tok + "@rabbit.internal:5672/vhost", idBasicAuth, tok},
		{"stripe key as user", "curl https://api.stripe.com/v1/charges -u " + sk + ": -d x=1", "stripe-access-token", sk},
		{"no password", "git push -u origin main && curl -u admin https://x.internal", "", ""},
		{"placeholder", "curl -u admin:$PASSWORD https://x.internal; wget https://user:<password>@host.internal", "", ""},
		{"no userinfo", "see https://example.com/a:b@c and http://localhost:8080/", "", ""},
	})
}

// TestAzureStorageKey: an account key in a connection string and in az's
// JSON; the emulator's published key is none.
func TestAzureStorageKey(t *testing.T) {
	g := newSecretGen(t, 31)
	k := g.make("azure-storage")
	runScanCases(t, newTestScanner(t), []scanCase{
		{"connection string", "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=" + k + ";EndpointSuffix=core.windows.net", idAzure, k},
		{"az keys list", "[\n  {\n    \"creationTime\": \"2024-03-01T10:00:00Z\",\n    \"keyName\": \"key1\",\n    \"permissions\": \"FULL\",\n    \"value\": \"" + k + "\"\n  }\n]", idAzure, k},
		{"flag", "az storage blob list --account-name acme --account-key " + k + " -c logs", idAzure, k},
		{"emulator", "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;", "", ""},
		{"placeholder", "AccountKey=<your-account-key>;", "", ""},
	})
}

// TestKubernetesSecret: every value of a Secret's data and stringData is a
// secret, whatever its key, in kubectl's YAML and JSON, escaped or
// line-numbered; a value that is the base64 of a secret is one also alone.
func TestKubernetesSecret(t *testing.T) {
	g := newSecretGen(t, 33)
	b64 := func(v string) string { return base64.StdEncoding.EncodeToString([]byte(v)) }
	dbURL := b64("postgres://app:" + g.make("password") + "@db.internal:5432/app")
	pat := b64(g.make("ghpat"))
	plain := g.make("password")
	yaml := "apiVersion: v1\ndata:\n  DATABASE_URL: " + dbURL + "\n  GITHUB_PAT: " + pat + "\nkind: Secret\nmetadata:\n  creationTimestamp: \"2026-10-02T09:14:31Z\"\n  name: api-secrets\n  namespace: prod\ntype: Opaque\n"
	json := "{\n    \"apiVersion\": \"v1\",\n    \"data\": {\n        \"DATABASE_URL\": \"" + dbURL + "\",\n        \"GITHUB_PAT\": \"" + pat + "\"\n    },\n    \"kind\": \"Secret\",\n    \"metadata\": {\"name\": \"api-secrets\"}\n}"
	tests := []struct {
		name, text string
		want       []string // the secrets, in order
	}{
		{"yaml", yaml, []string{dbURL, pat}},
		{"yaml line-numbered", numberLines(yaml), []string{dbURL, pat}},
		{"json", json, []string{dbURL, pat}},
		{"patch", "*** Begin Patch\n*** Add File: k8s/secret.yaml\n" + patchLines(yaml) + "*** End Patch\n", []string{dbURL, pat}},
		{"json escaped", layOut(json, "escaped"), []string{dbURL, pat}},
		{"yaml escaped", layOut(yaml, "escaped"), []string{dbURL, pat}},
		{"yaml line-numbered escaped", layOut(numberLines(yaml), "escaped"), []string{dbURL, pat}},
		{"stringData", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: api\nstringData:\n  ADMIN_USER: admin\n  SMTP_RELAY: " + plain + "\n", []string{"admin", plain}},
		{"alone", dbURL, []string{dbURL}},
		{"alone, a token", pat, []string{pat}},
		{"redacted", "apiVersion: v1\ndata:\n  A: [REDACTED:kubernetes-secret:1a2b]\n  B: \"{{ .Values.b | b64enc }}\"\n  C: " + pat + "\nkind: Secret\n", []string{pat}},
		{"a ConfigMap", "apiVersion: v1\ndata:\n  LOG_LEVEL: info\n  FEATURES: a,b,c\nkind: ConfigMap\n", nil},
		{"metadata", "kind: Secret\nmetadata:\n  name: api-secrets\n  namespace: prod\n", nil},
		{"data of an API", `{"data": {"id": "42", "name": "build"}, "kind": "Build"}`, nil},
		{"base64 of prose", b64("the quick brown fox jumps over the lazy dog"), nil},
	}
	s := newTestScanner(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []found
			for _, v := range tt.want {
				f := at("", tt.text, v)
				if len(want) > 0 {
					off := want[len(want)-1].End
					f = at("", tt.text[off:], v)
					f.Start, f.End = f.Start+off, f.End+off
				}
				want = append(want, f)
			}
			var got []found
			for _, f := range s.ScanString(tt.text) {
				got = append(got, found{"", f.Start, f.End})
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ScanString spans (-want +got):\n%s", diff)
			}
		})
	}
}

func numberLines(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(s, "\n") {
		fmt.Fprintf(&b, "%6d\t%s\n", i+1, l)
	}
	return b.String()
}

func patchLines(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		b.WriteString("+" + l + "\n")
	}
	return b.String()
}

// TestDecodedSecretAllocs: a text that is wholly base64 of binary (an
// image, a signature) is told from one of text without allocating.
func TestDecodedSecretAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	s := newTestScanner(t)
	g := newSecretGen(t, 34)
	bin := base64.StdEncoding.EncodeToString([]byte(g.Str(300, "\x00\x01\x02\xfe\xff")))
	if fs := s.ScanString(bin); fs != nil {
		t.Fatalf("binary base64: %v", spans(fs))
	}
	if n := testing.AllocsPerRun(100, func() { s.ScanString(bin) }); n != 0 {
		t.Errorf("ScanString of base64 of binary allocates %v times", n)
	}
}

// TestAssignmentPrefilter: the check that lets gitleaks' keyword
// assignment rules skip a keyword hit never drops a match their regex
// makes: a scanner with it finds what one without it finds.
func TestAssignmentPrefilter(t *testing.T) {
	with := newTestScanner(t)
	without := newTestScanner(t)
	n := 0
	for _, r := range without.rules {
		if r.secretSet != nil {
			r.secretSet = nil // the regex runs at every hit with an operator after it
			n++
		}
	}
	if n == 0 {
		t.Fatal("no rule has the prefilter: the test tests nothing")
	}
	g := newSecretGen(t, 35)
	names := []string{"api_key", "apiKey", "auth token", "client-secret", "password for prod", "x.credential.y", "db_passwd", "ACCESS_KEY_ID"}
	ops := []string{"=", ": ", " = ", " => ", " := ", "::=", ":::=", " ?= ", "||", ", ", " > ", `": "`, `' : '`, "=\"", "==", ":\n  "}
	values := func() []string {
		return []string{g.make("generic"), g.make("envval"), "=" + g.make("generic"), "abc+def/ghijklmnop==", g.make("generic") + "\\\"", "short"}
	}
	ends := []string{"", "\n", ";", " ", "\"", "&x=1", ")", ",", "!"}
	c := 0
	for _, name := range names {
		for _, op := range ops {
			for _, v := range values() {
				for _, e := range ends {
					text := "cfg " + name + op + v + e
					if diff := cmp.Diff(spans(without.ScanString(text)), spans(with.ScanString(text))); diff != "" {
						t.Errorf("%q%q…%q: the prefilter changes the findings (-without +with):\n%s", name, op, e, diff)
					}
					c++
				}
			}
		}
	}
	t.Logf("%d texts", c)
}
