package secrets

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// A sample of the labeled corpus. For a positive, core is the part of the
// generated secret a finding must contain (the whole secret, except for a
// service-account key whose JSON string ends in an escaped newline).
type sample struct {
	name   string // record name and instance, safe to print
	ruleID string // expected rule; "" for negatives
	text   string
	core   string
}

const (
	alnum  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	upper  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	lower  = "abcdefghijklmnopqrstuvwxyz"
	digits = "0123456789"
	hexd   = "0123456789abcdef"
	b64c   = alnum + "+/"
	b64u   = alnum + "_-"
)

// secretGen makes fake secrets in the shapes of real ones, from a fixed seed.
type secretGen struct {
	r    *rand.Rand
	rsa  []*rsa.PrivateKey
	used int
}

func newSecretGen(t testing.TB, seed uint64) *secretGen {
	t.Helper()
	g := &secretGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for range 2 {
		k, err := rsa.GenerateKey(crand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		g.rsa = append(g.rsa, k)
	}
	return g
}

func (g *secretGen) str(n int, chars string) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = chars[g.r.IntN(len(chars))]
	}
	return string(b)
}

func (g *secretGen) uuid() string {
	h := g.str(32, hexd)
	return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:]
}

func (g *secretGen) pemRSA(pkcs8 bool) string {
	k := g.rsa[g.used%len(g.rsa)]
	g.used++
	if pkcs8 {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			panic(err)
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
}

// secret returns a fake secret of the named shape, and the core a finding
// must contain. A kind may name layouts after it, applied in order
// ("pem-rsa|lineno|escaped": see layOut).
func (g *secretGen) secret(kind string) (string, string) {
	kind, how, _ := strings.Cut(kind, "|")
	s := g.make(kind)
	if how != "" {
		for l := range strings.SplitSeq(how, "|") {
			s = layOut(s, l)
		}
		if i := strings.Index(s, "-----BEGIN"); i >= 0 {
			core := s[i:]
			if j := strings.LastIndex(core, "PRIVATE KEY-----"); j > 0 {
				core = core[:j+len("PRIVATE KEY-----")]
			}
			return s, core
		}
		return s, s
	}
	switch kind {
	case "gcpsa", "pem-rsa", "pem-ec", "pem-ed25519", "pem-openssh", "pem-escaped", "pem-long":
		core := strings.TrimSuffix(strings.TrimSuffix(s, "\n"), `\n`)
		return s, core
	}
	return s, s
}

// layOut lays a PEM key (or any multi-line secret) out as an agent's tools
// show it.
func layOut(s, how string) string {
	s = strings.TrimSuffix(s, "\n")
	lines := strings.Split(s, "\n")
	each := func(f func(i int, l string) string) string {
		out := make([]string, len(lines))
		for i, l := range lines {
			out[i] = f(i, l)
		}
		return strings.Join(out, "\n")
	}
	switch how {
	case "escaped": // inside a JSON string, seen in the JSON that holds it
		return strings.NewReplacer("\\", `\\`, "\"", `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s)
	case "escaped2": // inside a JSON string inside a JSON string
		return layOut(layOut(s, "escaped"), "escaped")
	case "ascii": // escaped by a client that writes ASCII only (Python's json.dumps)
		return strings.ReplaceAll(s, "→", `\u2192`)
	case "crlf":
		return strings.ReplaceAll(s, "\n", "\r\n")
	case "indent": // a YAML block (tls.key: |), the first line indented by the record
		return strings.ReplaceAll(s, "\n", "\n    ")
	case "lineno": // Claude Code's Read tool
		return each(func(i int, l string) string { return fmt.Sprintf("%6d→%s", i+1, l) })
	case "catn":
		return each(func(i int, l string) string { return fmt.Sprintf("%6d\t%s", i+1, l) })
	case "diff":
		return each(func(_ int, l string) string { return "+" + l })
	case "flat":
		return strings.Join(lines, " ")
	case "cut": // the END line and more lost: cut in the middle of a line
		keep := lines[:len(lines)-3]
		last := keep[len(keep)-1]
		keep[len(keep)-1] = last[:len(last)/2]
		lines = keep
		return strings.Join(lines, "\n")
	}
	panic("unknown layout " + how)
}

func (g *secretGen) make(kind string) string {
	switch kind {
	case "akia":
		return "AKIA" + g.str(16, upper+"234567")
	case "awssecret":
		for {
			s := g.str(40, b64c)
			if strings.ContainsAny(s, digits+"/+") {
				return s
			}
		}
	case "ghp":
		return "ghp_" + g.str(36, alnum)
	case "ghpat":
		return "github_pat_" + g.str(22, alnum) + "_" + g.str(59, alnum)
	case "gho":
		return "gho_" + g.str(36, alnum)
	case "xoxb":
		return "xoxb-" + g.str(11, digits) + "-" + g.str(12, digits) + "-" + g.str(24, alnum)
	case "slackhook":
		return "https://hooks.slack.com/services/T" + g.str(8, upper+digits) + "/B" + g.str(8, upper+digits) + "/" + g.str(24, alnum)
	case "stripe":
		return "sk_" + "live_" + g.str(24+g.r.IntN(76), alnum)
	case "openai":
		return "sk-proj-" + g.str(74, b64u) + "T3BlbkFJ" + g.str(73, b64u) + g.str(1, alnum)
	case "anthropic":
		return "sk-ant-api03-" + g.str(93, b64u) + "AA"
	case "gcpsa":
		k := g.pemRSA(true)
		return strings.ReplaceAll(k, "\n", `\n`)
	case "pem-rsa":
		return g.pemRSA(false)
	case "pem-ec":
		k, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
		if err != nil {
			panic(err)
		}
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			panic(err)
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	case "pem-ed25519":
		_, k, err := ed25519.GenerateKey(crand.Reader)
		if err != nil {
			panic(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			panic(err)
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	case "pem-openssh":
		body := "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW" + g.str(330, b64c) + "=="
		var b strings.Builder
		b.WriteString("-----BEGIN OPENSSH PRIVATE KEY-----\n")
		for len(body) > 70 {
			b.WriteString(body[:70] + "\n")
			body = body[70:]
		}
		b.WriteString(body + "\n-----END OPENSSH PRIVATE KEY-----\n")
		return b.String()
	case "pem-long": // the shape of a 4096-bit RSA key, longer than any regex window
		body := "MIIJKQIBAAKCAgEA" + g.str(3200, b64c)
		var b strings.Builder
		b.WriteString("-----BEGIN RSA PRIVATE KEY-----\n")
		for len(body) > 64 {
			b.WriteString(body[:64] + "\n")
			body = body[64:]
		}
		b.WriteString(body + "==\n-----END RSA PRIVATE KEY-----\n")
		return b.String()
	case "pem-escaped":
		return strings.ReplaceAll(g.make("pem-ec"), "\n", `\n`)
	case "jwt":
		enc := base64.RawURLEncoding
		head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
		claims, _ := json.Marshal(map[string]any{"sub": g.uuid(), "iat": 1714650000 + g.r.IntN(1e6), "scope": "read write"})
		body := head + "." + enc.EncodeToString(claims)
		m := hmac.New(sha256.New, []byte(g.str(32, alnum)))
		m.Write([]byte(body))
		return body + "." + enc.EncodeToString(m.Sum(nil))
	case "dbpass":
		return g.str(10+g.r.IntN(10), alnum+"!%^*_-")
	case "envval":
		return g.str(24+g.r.IntN(16), alnum)
	case "glpat":
		return "glpat-" + g.str(20, alnum)
	case "npm":
		return "npm_" + g.str(36, alnum)
	case "aiza":
		return "AIza" + g.str(35, alnum+"_-")
	case "sendgrid":
		return "SG." + g.str(22, b64u) + "." + g.str(43, b64u)
	case "twilio":
		return "SK" + g.str(32, hexd)
	case "hf":
		return "hf_" + g.str(34, upper+lower)
	case "dop":
		return "dop_v1_" + g.str(64, hexd)
	case "shpat":
		return "shpat_" + g.str(32, hexd)
	case "linear":
		return "lin_api_" + g.str(40, alnum)
	case "pypi":
		return "pypi-AgEIcHlwaS5vcmc" + g.str(60, b64u)
	case "age":
		return "AGE-SECRET-KEY-1" + g.str(58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L")
	case "doppler":
		return "dp.pt." + g.str(43, alnum)
	case "databricks":
		return "dapi" + g.str(32, hexd)
	case "glsa":
		return "glsa_" + g.str(32, alnum) + "_" + g.str(8, hexd)
	case "hvs":
		return "hvs." + g.str(95, b64u)
	case "pplx":
		return "pplx-" + g.str(48, alnum)
	case "pmak":
		return "PMAK-" + g.str(24, hexd) + "-" + g.str(34, hexd)
	case "pulumi":
		return "pul-" + g.str(40, hexd)
	case "sentry":
		return "sntryu_" + g.str(64, hexd)
	case "heroku":
		return "HRKU-AA" + g.str(58, b64u)
	case "pscale":
		return "pscale_tkn_" + g.str(43, alnum)
	case "generic":
		return g.str(32, alnum)
	case "password": // a generated password: letters, digits, symbols
		for {
			p := g.str(1, alnum) + g.str(11+g.r.IntN(12), alnum+"!%^*-_=+@.~")
			if strings.ContainsAny(p, digits) && strings.ContainsAny(p, "!%^*=+@~") {
				return p
			}
		}
	case "azurekey":
		return g.str(86, b64c) + "=="
	}
	panic("unknown secret kind " + kind)
}

// fillNegative replaces the {{uuid}}-style tokens of a negative record;
// other {{...}} text stays as it is.
func (g *secretGen) fillNegative(body string) string {
	var b strings.Builder
	for {
		i := strings.Index(body, "{{")
		if i < 0 {
			b.WriteString(body)
			return b.String()
		}
		j := strings.Index(body[i:], "}}")
		b.WriteString(body[:i])
		tok := body[i+2 : i+j]
		body = body[i+j+2:]
		kind, arg, _ := strings.Cut(tok, ":")
		n, _ := strconv.Atoi(arg)
		switch kind {
		case "uuid":
			b.WriteString(g.uuid())
		case "sha1":
			b.WriteString(g.str(40, hexd))
		case "sha256":
			b.WriteString(g.str(64, hexd))
		case "md5":
			b.WriteString(g.str(32, hexd))
		case "hex":
			b.WriteString(g.str(n, hexd))
		case "b64":
			b.WriteString(g.str(n, b64c))
		default: // not ours, e.g. ${{ secrets.X }}: keep it
			b.WriteString("{{" + tok + "}}")
		}
	}
}

type record struct{ header, body string }

func readRecords(t testing.TB, path string) []record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []record
	for _, part := range strings.Split("\n"+string(data), "\n=== ")[1:] {
		header, body, _ := strings.Cut(part, "\n")
		recs = append(recs, record{header: header, body: strings.TrimRight(body, "\n")})
	}
	return recs
}

// corpus is the labeled corpus: instances of every record of
// testdata/positives.txt and testdata/negatives.txt.
type corpus struct {
	pos, neg []sample
	gen      *secretGen
	negRecs  []record
	posRecs  []record
}

func loadCorpus(t testing.TB, instances int) *corpus {
	t.Helper()
	c := &corpus{
		gen:     newSecretGen(t, 1),
		posRecs: readRecords(t, "testdata/positives.txt"),
		negRecs: readRecords(t, "testdata/negatives.txt"),
	}
	for i := range instances {
		for _, r := range c.posRecs {
			c.pos = append(c.pos, c.positive(r, i))
		}
		for _, r := range c.negRecs {
			c.neg = append(c.neg, sample{name: fmt.Sprintf("%s#%d", r.header, i), text: c.gen.fillNegative(r.body)})
		}
	}
	return c
}

func (c *corpus) positive(r record, i int) sample {
	id, kind, _ := strings.Cut(r.header, " ")
	s, core := c.gen.secret(kind)
	return sample{
		name:   fmt.Sprintf("%s/%s#%d", id, kind, i),
		ruleID: id,
		text:   strings.Replace(r.body, "{{S}}", s, 1),
		core:   core,
	}
}

// prompt builds a realistic text of at least size bytes from the negative
// records, with n positives spread through it.
func (c *corpus) prompt(size, n int) string {
	r := rand.New(rand.NewPCG(7, 11))
	var parts []string
	total := 0
	for total < size {
		rec := c.negRecs[r.IntN(len(c.negRecs))]
		p := c.gen.fillNegative(rec.body)
		parts = append(parts, p)
		total += len(p) + 2
	}
	for i := range n {
		rec := c.posRecs[(i*7)%len(c.posRecs)]
		at := (i*len(parts))/n + 1
		parts[at-1] = parts[at-1] + "\n\n" + c.positive(rec, 100+i).text
	}
	return strings.Join(parts, "\n\n")
}

type scoreCard struct {
	found, sameID, total int
	missed, relabeled    []string
}

func (sc scoreCard) recall() float64 { return float64(sc.found) / float64(sc.total) }

// score counts positives whose core lies inside one finding; detect returns
// each finding's rule id and secret.
func score(pos []sample, detect func(text string) (ids, secrets []string)) scoreCard {
	var sc scoreCard
	for _, p := range pos {
		sc.total++
		ids, secs := detect(p.text)
		hit := false
		for i, s := range secs {
			if strings.Contains(s, p.core) {
				hit = true
				if ids[i] == p.ruleID {
					sc.sameID++
				} else {
					sc.relabeled = append(sc.relabeled, p.name+" as "+ids[i])
				}
				break
			}
		}
		if hit {
			sc.found++
		} else {
			sc.missed = append(sc.missed, p.name)
		}
	}
	return sc
}

func ours(s *Scanner) func(string) ([]string, []string) {
	return func(text string) (ids, secrets []string) {
		for _, f := range s.ScanString(text) {
			ids = append(ids, f.RuleID)
			secrets = append(secrets, text[f.Start:f.End])
		}
		return ids, secrets
	}
}

func TestCorpus(t *testing.T) {
	s := newTestScanner(t)
	c := loadCorpus(t, 3)
	kinds := map[string]bool{}
	for _, p := range c.pos {
		kinds[p.ruleID] = true
	}
	if len(kinds) < 20 {
		t.Fatalf("corpus has %d secret types, want at least 20", len(kinds))
	}

	sc := score(c.pos, ours(s))
	t.Logf("ours: recall %.3f (%d/%d over %d types); rule id as labeled for %d, other ids: %v; missed: %v",
		sc.recall(), sc.found, sc.total, len(kinds), sc.sameID, sc.relabeled, sc.missed)
	if sc.recall() < 0.95 {
		t.Errorf("recall %.3f < 0.95", sc.recall())
	}

	fp := 0
	for _, n := range c.neg {
		if fs := s.ScanString(n.text); len(fs) > 0 {
			fp++
			var ids []string
			for _, f := range fs {
				ids = append(ids, f.RuleID)
			}
			t.Logf("false positive in %s: %v", n.name, ids)
		}
	}
	rate := float64(fp) / float64(len(c.neg))
	t.Logf("ours: false-positive rate %.3f (%d/%d negative samples)", rate, fp, len(c.neg))
	if rate > 0.02 {
		t.Errorf("false-positive rate %.3f > 0.02", rate)
	}
}
