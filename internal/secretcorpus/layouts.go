package secretcorpus

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// assignment is a secret assigned to a name, as a layout writes it.
type assignment struct {
	t     secretType
	name  string // the variable, UPPER_SNAKE
	value string // as assigned: the secret, or the URL or connection string around it
	p     *plant
}

// assign makes a secret of type t for a layout at a location, and the
// assignment that carries it.
func (sg *sessionGen) assign(t secretType, location, layout string) assignment {
	name := "PRIVATE_KEY" // PEM keys: their layouts name them
	if len(t.vars) > 0 {
		name = sg.g.pick(t.vars...)
	}
	v := sg.secretValue(t)
	a := assignment{t: t, name: name, value: v, p: sg.plant(t, location, layout, v)}
	switch {
	case t.wrap == "db":
		a.value = sg.dbURL(name, v)
	case t.wrap == "azure" && strings.HasSuffix(name, "CONNECTION_STRING"):
		a.value = sg.azureConnection(v)
	}
	return a
}

func (sg *sessionGen) secretValue(t secretType) string {
	if t.kind == "gcpsa" {
		return sg.g.pemRSA(2048, true)
	}
	return sg.g.Make(t.kind)
}

func (sg *sessionGen) dbURL(name, pass string) string {
	g := sg.g
	switch name {
	case "REDIS_URL":
		return "rediss://default:" + pass + "@cache-" + g.Str(5, lower+digits) + ".acme.internal:6380/0"
	case "MONGODB_URI":
		return "mongodb+srv://app:" + pass + "@cluster0." + g.Str(5, lower+digits) + ".mongodb.net/app?retryWrites=true&w=majority"
	}
	if g.chance(0.3) {
		return "mysql://app:" + pass + "@db-" + g.Str(4, lower+digits) + ".acme.internal:3306/app"
	}
	return g.pick("postgres", "postgresql") + "://app:" + pass + "@db.prod.acme.internal:5432/app?sslmode=require"
}

func (sg *sessionGen) azureConnection(key string) string {
	return "DefaultEndpointsProtocol=https;AccountName=acme" + sg.g.Str(6, lower+digits) + ";AccountKey=" + key + ";EndpointSuffix=core.windows.net"
}

// in writes a's value into t between before and after, and marks its
// secret there.
func (a assignment) in(t *text, before, after string) *text {
	return t.add(before + a.value + after).secret(a.p)
}

// quoted is v in double quotes when it needs them, or sometimes anyway.
func (sg *sessionGen) quoted(v string, always float64) string {
	if !plainValue(v) || sg.g.chance(always) {
		return `"` + v + `"`
	}
	return v
}

// file renders a file layout holding as (one assignment, or an AWS key
// pair); it returns the text and a path such a file has.
func (sg *sessionGen) file(layout string, as []assignment) (*text, string) {
	g := sg.g
	t := &text{}
	switch layout {
	case "env":
		t.add("# " + g.pick("production", "staging", "local") + " settings\nNODE_ENV=production\nPORT=" + g.pick("3000", "8080", "8000") + "\n")
		for _, a := range as {
			exp := ""
			if g.chance(0.2) {
				exp = "export "
			}
			a.in(t, exp+a.name+"=", "")
			sg.requote(t, a.value, 0.3)
			t.add("\n")
		}
		t.add("LOG_LEVEL=info\nREDIS_HOST=redis.acme.internal\n")
		sg.placeholderLine(t, "env")
		return t, g.pick(".env", ".env.production", "config/.env.local")
	case "ini":
		t.add("[default]\n")
		for _, a := range as {
			a.in(t, snakeName(a.name)+" = ", "\n")
		}
		t.add("region = " + g.pick("us-east-1", "eu-west-1") + "\noutput = json\n")
		return t, "~/.aws/credentials"
	case "yaml":
		t.add("# config/" + g.pick("production", "staging") + ".yaml\nserver:\n  port: 8080\n  log_level: info\n" + g.pick("app", "auth", "integrations", "services", "credentials") + ":\n")
		for _, a := range as {
			a.in(t, "  "+snakeName(a.name)+": ", "")
			sg.requote(t, a.value, 0.4)
			t.add("\n")
		}
		t.add("  timeout: 30s\n")
		sg.placeholderLine(t, "yaml")
		return t, g.pick("config/production.yaml", "config/settings.yml", "deploy/values.yaml")
	case "toml":
		t.add("[server]\nport = 8080\n\n[" + g.pick("app", "auth", "integrations", "secrets") + "]\n")
		for _, a := range as {
			a.in(t, snakeName(a.name)+` = "`, `"`+"\n")
		}
		t.add(`timeout = "30s"` + "\n")
		return t, g.pick("config.toml", ".streamlit/secrets.toml", "settings.toml")
	case "k8s-env":
		t.add("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\n  namespace: prod\nspec:\n  replicas: 2\n  template:\n    spec:\n      containers:\n        - name: api\n")
		t.add("          image: ghcr.io/acme/api@sha256:")
		d := g.Str(64, hexd)
		t.add(d+"\n").negative("sha256", d)
		t.add("          env:\n            - name: LOG_LEVEL\n              value: info\n")
		for _, a := range as {
			t.add("            - name: " + a.name + "\n")
			a.in(t, "              value: ", "")
			sg.requote(t, a.value, 0.7)
			t.add("\n")
		}
		t.add("            - name: REDIS_HOST\n              value: redis.prod.svc.cluster.local\n")
		return t, g.pick("k8s/deployment.yaml", "deploy/api.yaml")
	case "k8s-secret":
		t.add("apiVersion: v1\nkind: Secret\nmetadata:\n  name: api-secrets\n  namespace: prod\ntype: Opaque\nstringData:\n")
		for _, a := range as {
			key := a.name
			if g.chance(0.4) {
				key = kebabName(a.name)
			}
			a.in(t, "  "+key+": ", "")
			sg.requote(t, a.value, 0.5)
			t.add("\n")
		}
		return t, g.pick("k8s/secret.yaml", "deploy/secrets.yaml")
	case "k8s-secret-data":
		// As kubectl get secret -o yaml shows it: the value base64-encoded.
		t.add("apiVersion: v1\ndata:\n")
		for _, a := range as {
			enc := base64.StdEncoding.EncodeToString([]byte(a.value))
			a.p.value = enc
			a.p.probes = sg.probesFor("", enc)
			t.add("  " + a.name + ": " + enc + "\n").secret(a.p)
		}
		uid := g.UUID()
		t.add("kind: Secret\nmetadata:\n  creationTimestamp: \"2026-10-02T09:14:31Z\"\n  name: api-secrets\n  namespace: prod\n  resourceVersion: \""+fmt.Sprint(40000+g.IntN(9999))+"\"\n  uid: "+uid+"\ntype: Opaque\n").negative("uuid", uid)
		return t, "k8s/secret.yaml"
	case "code":
		return sg.codeFile(as)
	case "json":
		inner := obj{{"Logging", obj{{"LogLevel", obj{{"Default", "Information"}}}}}}
		sec := obj{}
		for _, a := range as {
			sec = append(sec, field{pascalName(a.name), (&text{s: a.value}).secret(a.p)})
		}
		sec = append(sec, field{"TimeoutSeconds", 30})
		inner = append(inner, field{g.pick("Integrations", "Secrets", "ConnectionStrings", "Auth"), sec}, field{"AllowedHosts", "*"})
		return jsonText(inner, indented("  ", false, false)), g.pick("appsettings.Production.json", "config/secrets.json")
	case "pem-file":
		a := as[0]
		a.in(t, "", "")
		return t, g.pick("certs/server.key", "~/.ssh/id_rsa", "deploy/signing.pem", "secrets/jwt-private.pem")
	case "k8s-tls":
		a := as[0]
		t.add("apiVersion: v1\nkind: Secret\nmetadata:\n  name: web-tls\n  namespace: prod\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n")
		t.with(sg.certificate().mapLines(indentLine("    ")))
		t.add("\n  tls.key: |\n")
		t.with((&text{s: strings.TrimSuffix(a.value, "\n")}).secret(a.p).mapLines(indentLine("    ")))
		t.add("\n")
		return t, "k8s/tls-secret.yaml"
	case "yaml-block":
		a := as[0]
		t.add("signing:\n  algorithm: " + g.pick("RS256", "ES256", "EdDSA") + "\n  key_id: " + g.Str(8, hexd) + "\n  private_key: |\n")
		t.with((&text{s: strings.TrimSuffix(a.value, "\n")}).secret(a.p).mapLines(indentLine("    ")))
		t.add("\n")
		return t, "config/signing.yaml"
	case "env-escaped":
		a := as[0]
		name := g.pick("JWT_PRIVATE_KEY", "SIGNING_KEY", "GITHUB_APP_PRIVATE_KEY", "SSH_PRIVATE_KEY")
		t.add("NODE_ENV=production\n" + name + `="` + strings.ReplaceAll(a.value, "\n", `\n`) + `"` + "\n").secret(a.p)
		t.add("LOG_LEVEL=info\n")
		return t, ".env"
	case "json-escaped":
		a := as[0]
		tree := obj{
			{"issuer", "https://auth.acme.dev"},
			{"audience", "api"},
			{g.pick("private_key", "privateKey", "signing_key"), (&text{s: a.value}).secret(a.p)},
			{"algorithm", "RS256"},
		}
		return jsonText(tree, indented("  ", false, false)), g.pick("config/jwt.json", "secrets/signing.json")
	case "gcp-sa-json":
		a := as[0]
		proj := "acme-" + g.pick("prod", "data", "ml") + "-" + g.Str(6, digits)
		tree := obj{
			{"type", "service_account"},
			{"project_id", proj},
			{"private_key_id", g.Str(40, hexd)},
			{"private_key", (&text{s: a.value}).secret(a.p)},
			{"client_email", "deploy@" + proj + ".iam.gserviceaccount.com"},
			{"client_id", g.Str(21, digits)},
			{"auth_uri", "https://accounts.google.com/o/oauth2/auth"},
			{"token_uri", "https://oauth2.googleapis.com/token"},
			{"auth_provider_x509_cert_url", "https://www.googleapis.com/oauth2/v1/certs"},
			{"client_x509_cert_url", "https://www.googleapis.com/robot/v1/metadata/x509/deploy%40" + proj + ".iam.gserviceaccount.com"},
			{"universe_domain", "googleapis.com"},
		}
		return jsonText(tree, indented("  ", false, false)), "credentials/sa-key.json"
	}
	panic("secretcorpus: unknown file layout " + layout)
}

// requote puts the value just written at t's end in quotes when needed.
func (sg *sessionGen) requote(t *text, v string, always float64) {
	if q := sg.quoted(v, always); q != v {
		t.s = strings.TrimSuffix(t.s, v) + q
	}
}

func indentLine(prefix string) func(int, string) string {
	return func(_ int, l string) string { return prefix + l }
}

func (sg *sessionGen) codeFile(as []assignment) (*text, string) {
	g := sg.g
	t := &text{}
	switch g.IntN(3) {
	case 0:
		t.add("import os\n\nfrom app.settings import Settings\n\n")
		for _, a := range as {
			if g.chance(0.5) {
				a.in(t, a.name+` = os.environ.get("`+a.name+`", "`, `")`+"\n")
			} else {
				a.in(t, a.name+` = "`, `"`+"\n")
			}
		}
		t.add("\nsettings = Settings(debug=False)\n")
		return t, g.pick("app/config.py", "settings.py")
	case 1:
		t.add("export const config = {\n  port: Number(process.env.PORT ?? 3000),\n")
		for _, a := range as {
			q := g.pick(`"`, `'`)
			a.in(t, "  "+camelName(a.name)+": process.env."+a.name+" ?? "+q, q+",\n")
		}
		t.add("};\n")
		return t, g.pick("src/config.ts", "src/config.js")
	}
	t.add("package config\n\n// Defaults for local development.\nconst (\n")
	for _, a := range as {
		a.in(t, "\t"+camelName(a.name)+` = "`, `"`+"\n")
	}
	t.add(")\n")
	return t, "internal/config/defaults.go"
}

// placeholderLine adds, sometimes, a secret-named line whose value is a
// placeholder: a hard negative.
func (sg *sessionGen) placeholderLine(t *text, layout string) {
	if !sg.g.chance(0.35) {
		return
	}
	name, v := sg.placeholder()
	switch layout {
	case "yaml":
		t.add("  " + snakeName(name) + ": " + yamlPlaceholder(v) + "\n")
	default:
		t.add(name + "=" + v + "\n")
	}
	t.negative("placeholder", v)
}

func yamlPlaceholder(v string) string {
	if strings.ContainsAny(v, "<>{}$") {
		return `"` + v + `"`
	}
	return v
}

// placeholder is a secret-named variable and a placeholder value for it.
func (sg *sessionGen) placeholder() (name, value string) {
	g := sg.g
	name = g.pick("WEBHOOK_SIGNING_SECRET", "OPENAI_API_KEY", "DB_PASSWORD", "STRIPE_SECRET_KEY", "SESSION_SECRET", "API_TOKEN", "SMTP_PASSWORD", "GITHUB_TOKEN")
	value = g.pick(
		"change-me", "change_me", "changeme", "CHANGE_ME",
		"your-api-key-here", "your_api_key_here", "your-"+kebabName(name)+"-here",
		"<token>", "<your-api-key>", "<"+strings.ToLower(name)+">",
		"xxxxxxxxxxxxxxxx", "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", "XXXXXXXXXXXXXXXXXXXXXXXX",
		"${"+name+"}", "${{ secrets."+name+" }}", "{{ .Values."+camelName(name)+" }}",
	)
	return name, value
}

// certificate is a PEM certificate (random bytes, DER-shaped): public, a
// hard negative (one of its lines is labeled).
func (sg *sessionGen) certificate() *text {
	der := append([]byte{0x30, 0x82, 0x03, 0x1f, 0x30, 0x82, 0x02, 0x07, 0xa0, 0x03, 0x02, 0x01, 0x02}, sg.g.bytes(790)...)
	p := pemString("CERTIFICATE", der)
	lines := strings.Split(p, "\n")
	return (&text{s: strings.TrimSuffix(p, "\n")}).negative("certificate", lines[2])
}

// command renders a command-line layout (curl, url, shell) holding a.
func (sg *sessionGen) command(layout string, a assignment) *text {
	g := sg.g
	t := &text{}
	v := a.value
	switch layout {
	case "curl":
		host := "https://" + a.t.host
		switch h := a.t.curl; {
		case h == "bearer":
			if g.chance(0.5) {
				return a.in(t, "curl -sS "+host+` -H "Authorization: Bearer `, `" | jq .`)
			}
			return a.in(t, `curl -H "Authorization: Bearer `, `" -H "Accept: application/json" `+host)
		case h == "token":
			return a.in(t, `curl -s -H "Authorization: token `, `" `+host)
		case h == "user":
			return a.in(t, "curl "+host+" \\\n  -u ", ": \\\n  -d amount=2000 \\\n  -d currency=usd")
		case h == "pass":
			return a.in(t, "curl -fsS -u admin:", " "+host)
		case strings.HasPrefix(h, "header:"):
			q := g.pick(`"`, `'`)
			return a.in(t, "curl -sS -X GET "+host+" -H "+q+strings.TrimPrefix(h, "header:")+": ", q)
		case h == "query":
			return a.in(t, `curl -s "`+host+`?address=1600+Amphitheatre+Pkwy&key=`, `&language=en"`)
		case h == "self":
			return a.in(t, `curl -X POST -H 'Content-type: application/json' --data '{"text":"deploy finished"}' `, "")
		}
	case "url":
		switch a.t.url {
		case "query":
			key := "key"
			if a.t.wrap == "" && a.t.named {
				key = "api_key"
			}
			return a.in(t, "wget -qO- 'https://"+a.t.host+"?limit=50&"+key+"=", "&format=json'")
		case "userinfo":
			switch {
			case strings.HasPrefix(a.t.name, "github"):
				return a.in(t, "git remote set-url origin https://x-access-token:", "@github.com/acme/api.git && git push origin HEAD")
			case a.t.name == "gitlab-pat":
				return a.in(t, "git clone https://oauth2:", "@gitlab.com/acme/infra.git")
			}
			return a.in(t, "wget -qO- https://admin:", "@"+a.t.host)
		case "self":
			if strings.HasPrefix(v, "redis") {
				return a.in(t, `redis-cli -u "`, `" ping`)
			}
			if strings.HasPrefix(v, "mongodb") {
				return a.in(t, `mongosh "`, `" --eval 'db.users.countDocuments()'`)
			}
			return a.in(t, `psql "`, `" -c 'select count(*) from users;'`)
		}
	case "shell":
		qv := sg.quoted(v, 0.3)
		switch {
		case a.t.name == "aws-secret-access-key" && g.chance(0.5):
			t.add("aws configure set aws_secret_access_key " + qv)
		case g.chance(0.25):
			t.add("kubectl create secret generic api-secrets -n prod --from-literal=" + a.name + "=" + qv)
		case g.chance(0.25):
			t.add("docker run --rm -e " + a.name + "=" + qv + " ghcr.io/acme/api:latest migrate")
		case g.chance(0.25):
			t.add(`gh secret set ` + a.name + ` --body "` + v + `"`)
		default:
			t.add("export " + a.name + "=" + qv + " && npm run deploy")
		}
		return t.secret(a.p)
	}
	panic("secretcorpus: unknown command layout " + layout)
}

// history renders shell history around the command lines given.
func (sg *sessionGen) history(cmds []*text) *text {
	g := sg.g
	filler := []string{"git status", "npm test", "ls -la", "cd ~/src/api", "docker ps", "make build", "git pull --rebase", "kubectl get pods -n prod", "vim .env"}
	var lines []*text
	for range 3 + g.IntN(3) {
		lines = append(lines, &text{s: g.pick(filler...)})
	}
	for _, c := range cmds {
		at := g.IntN(len(lines) + 1)
		lines = append(lines[:at], append([]*text{c}, lines[at:]...)...)
	}
	zsh := g.chance(0.5)
	t := &text{}
	n, ts := 480+g.IntN(500), 1764000000+g.IntN(1e6)
	for i, l := range lines {
		s := strings.ReplaceAll(l.s, "\\\n  ", "") // one line each
		if zsh {
			t.add(fmt.Sprintf(": %d:0;%s\n", ts+i*37, s))
		} else {
			t.add(fmt.Sprintf("%5d  %s\n", n+i, s))
		}
		t.marks = append(t.marks, l.marks...)
	}
	return t
}

// numbered shows a file as Claude Code's Read tool does (arrow) or as
// cat -n does (tab).
func numbered(t *text, arrow bool) *text {
	s := strings.TrimSuffix(t.s, "\n")
	lines := strings.Split(s, "\n")
	var b strings.Builder
	for i, l := range lines {
		if arrow {
			fmt.Fprintf(&b, "%6d→%s\n", i+1, l)
		} else {
			fmt.Fprintf(&b, "%6d\t%s\n", i+1, l)
		}
	}
	return &text{s: b.String(), marks: t.marks}
}

// patchAdd is an apply_patch that adds the file (Codex's custom tool).
func patchAdd(path string, t *text) *text {
	body := strings.TrimSuffix(t.s, "\n")
	lines := strings.Split(body, "\n")
	for i, l := range lines {
		lines[i] = "+" + l
	}
	return &text{s: "*** Begin Patch\n*** Add File: " + path + "\n" + strings.Join(lines, "\n") + "\n*** End Patch\n", marks: t.marks}
}
