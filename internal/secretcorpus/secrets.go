package secretcorpus

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Alphabets of the fake secrets.
const (
	alnum  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	upper  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	lower  = "abcdefghijklmnopqrstuvwxyz"
	digits = "0123456789"
	hexd   = "0123456789abcdef"
	b64c   = alnum + "+/"
	b64u   = alnum + "_-"
)

// Secrets makes fake secrets in the shapes of real ones. Everything it
// makes follows from its seed: private keys are random bytes in the DER
// structure of real ones (no key is generated), so a seed replays exactly.
// Nothing it makes is a live credential. Not safe for concurrent use.
type Secrets struct {
	r *rand.Rand
}

// NewSecrets returns a generator of fake secrets drawn from seed.
func NewSecrets(seed uint64) *Secrets {
	return &Secrets{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Str returns n bytes drawn from chars.
func (g *Secrets) Str(n int, chars string) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = chars[g.r.IntN(len(chars))]
	}
	return string(b)
}

// IntN returns a number in [0, n).
func (g *Secrets) IntN(n int) int { return g.r.IntN(n) }

// UUID returns a version-4 UUID, lowercase.
func (g *Secrets) UUID() string {
	h := g.Str(32, hexd)
	return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:]
}

func (g *Secrets) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.r.UintN(256))
	}
	return b
}

// bigInt is a random n-byte integer with its top bit set.
func (g *Secrets) bigInt(n int) *big.Int {
	b := g.bytes(n)
	b[0] |= 0x80
	return new(big.Int).SetBytes(b)
}

type pkcs1Key struct {
	Version                     int
	N, E, D, P, Q, Dp, Dq, Qinv *big.Int
}

type pkcs8Key struct {
	Version    int
	Algo       pkix.AlgorithmIdentifier
	PrivateKey []byte
}

type ecKey struct {
	Version    int
	PrivateKey []byte
	Curve      asn1.ObjectIdentifier `asn1:"optional,explicit,tag:0"`
	PublicKey  asn1.BitString        `asn1:"optional,explicit,tag:1"`
}

func mustMarshal(v any) []byte {
	b, err := asn1.Marshal(v)
	if err != nil {
		panic("secretcorpus: " + err.Error()) // the structures above always marshal
	}
	return b
}

// rsaDER is an RSA private key of bits bits in PKCS#1 or PKCS#8 DER, with
// random numbers of the right sizes (not a usable key).
func (g *Secrets) rsaDER(bits int, pkcs8 bool) []byte {
	n := bits / 8
	k := pkcs1Key{
		N: g.bigInt(n), E: big.NewInt(65537), D: g.bigInt(n),
		P: g.bigInt(n / 2), Q: g.bigInt(n / 2), Dp: g.bigInt(n / 2), Dq: g.bigInt(n / 2), Qinv: g.bigInt(n / 2),
	}
	der := mustMarshal(k)
	if !pkcs8 {
		return der
	}
	return mustMarshal(pkcs8Key{Algo: pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}, Parameters: asn1.NullRawValue}, PrivateKey: der})
}

func pemString(typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

// PEMRSA returns a 2048-bit RSA private key in PEM, PKCS#8 ("PRIVATE
// KEY") or PKCS#1 ("RSA PRIVATE KEY").
func (g *Secrets) PEMRSA(pkcs8 bool) string { return g.pemRSA(2048, pkcs8) }

func (g *Secrets) pemRSA(bits int, pkcs8 bool) string {
	if pkcs8 {
		return pemString("PRIVATE KEY", g.rsaDER(bits, true))
	}
	return pemString("RSA PRIVATE KEY", g.rsaDER(bits, false))
}

// Kinds lists the kinds Make knows.
func Kinds() []string {
	return []string{
		"akia", "awssecret", "ghp", "ghpat", "gho", "xoxb", "slackhook", "stripe", "stripe-rk",
		"openai", "anthropic", "gcpsa", "pem-rsa", "pem-rsa-4096", "pem-ec", "pem-ed25519",
		"pem-openssh", "pem-escaped", "jwt", "dbpass", "envval", "password", "glpat", "npm", "aiza",
		"sendgrid", "twilio", "hf", "dop", "shpat", "linear", "pypi", "age", "doppler",
		"databricks", "glsa", "hvs", "pplx", "pmak", "pulumi", "sentry", "heroku", "pscale",
		"generic", "azure-storage", "azurekey", "pem-long", "password-symbols",
	}
}

// Secret returns a fake secret of the named kind, and the core a finding
// must contain: the whole secret, except for PEM keys and service-account
// keys, whose trailing newline (raw or escaped) is not part of it. A kind
// may name layouts after it, applied in order ("pem-rsa|lineno|escaped":
// see LayOut); the core of a key laid out runs from its BEGIN line to the
// end of its END line.
func (g *Secrets) Secret(kind string) (secret, core string) {
	kind, how, _ := strings.Cut(kind, "|")
	s := g.Make(kind)
	if how != "" {
		for l := range strings.SplitSeq(how, "|") {
			s = LayOut(s, l)
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
	if isPEMKind(kind) || kind == "gcpsa" {
		return s, strings.TrimSuffix(strings.TrimSuffix(s, "\n"), `\n`)
	}
	return s, s
}

// LayOut lays a PEM key (or any multi-line secret) out as an agent's
// tools show it: escaped (inside a JSON string, seen in the JSON that
// holds it), escaped2 (a JSON string inside a JSON string), ascii (the
// Read tool's arrow as Python's json.dumps writes it), crlf, indent (a
// YAML block: the lines after the first indented), lineno (Claude Code's
// Read tool), catn (cat -n), diff (added lines), flat (one line), cut (the
// END line and more lost, cut inside a line). It panics on a layout it
// does not know.
func LayOut(s, how string) string {
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
	case "escaped":
		return strings.NewReplacer("\\", `\\`, "\"", `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s)
	case "escaped2":
		return LayOut(LayOut(s, "escaped"), "escaped")
	case "ascii":
		return strings.ReplaceAll(s, "→", `\u2192`)
	case "crlf":
		return strings.ReplaceAll(s, "\n", "\r\n")
	case "indent":
		return strings.ReplaceAll(s, "\n", "\n    ")
	case "lineno":
		return each(func(i int, l string) string { return fmt.Sprintf("%6d→%s", i+1, l) })
	case "catn":
		return each(func(i int, l string) string { return fmt.Sprintf("%6d\t%s", i+1, l) })
	case "diff":
		return each(func(_ int, l string) string { return "+" + l })
	case "flat":
		return strings.Join(lines, " ")
	case "cut":
		keep := lines[:len(lines)-3]
		last := keep[len(keep)-1]
		keep[len(keep)-1] = last[:len(last)/2]
		return strings.Join(keep, "\n")
	}
	panic("secretcorpus: unknown layout " + how)
}

func isPEMKind(kind string) bool { return strings.HasPrefix(kind, "pem-") }

// Make returns a fake secret of the named kind (Kinds); it panics on a kind
// it does not know.
func (g *Secrets) Make(kind string) string {
	switch kind {
	case "akia":
		return "AKIA" + g.Str(16, upper+"234567")
	case "awssecret":
		for {
			s := g.Str(40, b64c)
			if strings.ContainsAny(s, digits+"/+") {
				return s
			}
		}
	case "ghp":
		return "ghp_" + g.Str(36, alnum)
	case "ghpat":
		return "github_pat_" + g.Str(22, alnum) + "_" + g.Str(59, alnum)
	case "gho":
		return "gho_" + g.Str(36, alnum)
	case "xoxb":
		return "xoxb-" + g.Str(11, digits) + "-" + g.Str(12, digits) + "-" + g.Str(24, alnum)
	case "slackhook":
		return "https://hooks.slack.com/services/T" + g.Str(8, upper+digits) + "/B" + g.Str(8, upper+digits) + "/" + g.Str(24, alnum)
	case "stripe":
		return "sk_" + "live_" + g.Str(24+g.r.IntN(76), alnum)
	case "stripe-rk":
		return "rk_" + "live_" + g.Str(24+g.r.IntN(76), alnum)
	case "openai":
		return "sk-proj-" + g.Str(74, b64u) + "T3BlbkFJ" + g.Str(73, b64u) + g.Str(1, alnum)
	case "anthropic":
		return "sk-ant-api03-" + g.Str(93, b64u) + "AA"
	case "gcpsa":
		return strings.ReplaceAll(g.pemRSA(2048, true), "\n", `\n`)
	case "pem-rsa":
		return g.pemRSA(2048, false)
	case "pem-rsa-4096":
		return g.pemRSA(4096, g.r.IntN(2) == 0)
	case "pem-ec":
		pub := append([]byte{4}, g.bytes(64)...)
		der := mustMarshal(ecKey{Version: 1, PrivateKey: g.bytes(32), Curve: asn1.ObjectIdentifier{1, 2, 840, 10045, 3, 1, 7}, PublicKey: asn1.BitString{Bytes: pub, BitLength: 8 * len(pub)}})
		return pemString("EC PRIVATE KEY", der)
	case "pem-ed25519":
		inner := mustMarshal(g.bytes(32)) // an OCTET STRING
		return pemString("PRIVATE KEY", mustMarshal(pkcs8Key{Algo: pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 3, 101, 112}}, PrivateKey: inner}))
	case "pem-openssh":
		body := opensshHeader + g.Str(330, b64c) + "=="
		var b strings.Builder
		b.WriteString("-----BEGIN OPENSSH PRIVATE KEY-----\n")
		for len(body) > 70 {
			b.WriteString(body[:70] + "\n")
			body = body[70:]
		}
		b.WriteString(body + "\n-----END OPENSSH PRIVATE KEY-----\n")
		return b.String()
	case "pem-long": // the shape of a 4096-bit RSA key, longer than any regex window
		body := "MIIJKQIBAAKCAgEA" + g.Str(3200, b64c)
		var b strings.Builder
		b.WriteString("-----BEGIN RSA PRIVATE KEY-----\n")
		for len(body) > 64 {
			b.WriteString(body[:64] + "\n")
			body = body[64:]
		}
		b.WriteString(body + "==\n-----END RSA PRIVATE KEY-----\n")
		return b.String()
	case "pem-escaped":
		return strings.ReplaceAll(g.Make("pem-ec"), "\n", `\n`)
	case "jwt":
		enc := base64.RawURLEncoding
		head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
		claims, _ := json.Marshal(map[string]any{"sub": g.UUID(), "iat": 1714650000 + g.r.IntN(1e6), "scope": "read write"})
		body := head + "." + enc.EncodeToString(claims)
		m := hmac.New(sha256.New, []byte(g.Str(32, alnum)))
		m.Write([]byte(body))
		return body + "." + enc.EncodeToString(m.Sum(nil))
	case "dbpass":
		return g.Str(10+g.r.IntN(10), alnum+"!%^*_-")
	case "envval":
		return g.Str(24+g.r.IntN(16), alnum)
	case "password": // a generated password: letters, digits, symbols
		for {
			p := g.Str(1, alnum) + g.Str(11+g.r.IntN(12), alnum+"!%^*-_=+@.~")
			if strings.ContainsAny(p, digits) && strings.ContainsAny(p, "!%^*=+@~") {
				return p
			}
		}
	case "password-symbols":
		// What people and password managers pick: letters, digits and
		// symbols, among them those Go's JSON escapes (&, <, >) and those a
		// YAML value or a shell needs quoted for.
		for {
			s := g.Str(12+g.r.IntN(13), alnum+alnum+"!#%&*+-.<=>?@^_~")
			if strings.ContainsAny(s, digits) && strings.ContainsAny(s, lower) && strings.ContainsAny(s, upper) {
				return s
			}
		}
	case "glpat":
		return "glpat-" + g.Str(20, alnum)
	case "npm":
		return "npm_" + g.Str(36, alnum)
	case "aiza":
		return "AIza" + g.Str(35, alnum+"_-")
	case "sendgrid":
		return "SG." + g.Str(22, b64u) + "." + g.Str(43, b64u)
	case "twilio":
		return "SK" + g.Str(32, hexd)
	case "hf":
		return "hf_" + g.Str(34, upper+lower)
	case "dop":
		return "dop_v1_" + g.Str(64, hexd)
	case "shpat":
		return "shpat_" + g.Str(32, hexd)
	case "linear":
		return "lin_api_" + g.Str(40, alnum)
	case "pypi":
		return "pypi-AgEIcHlwaS5vcmc" + g.Str(60, b64u)
	case "age":
		return "AGE-SECRET-KEY-1" + g.Str(58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L")
	case "doppler":
		return "dp.pt." + g.Str(43, alnum)
	case "databricks":
		return "dapi" + g.Str(32, hexd)
	case "glsa":
		return "glsa_" + g.Str(32, alnum) + "_" + g.Str(8, hexd)
	case "hvs":
		return "hvs." + g.Str(95, b64u)
	case "pplx":
		return "pplx-" + g.Str(48, alnum)
	case "pmak":
		return "PMAK-" + g.Str(24, hexd) + "-" + g.Str(34, hexd)
	case "pulumi":
		return "pul-" + g.Str(40, hexd)
	case "sentry":
		return "sntryu_" + g.Str(64, hexd)
	case "heroku":
		return "HRKU-AA" + g.Str(58, b64u)
	case "pscale":
		return "pscale_tkn_" + g.Str(43, alnum)
	case "generic":
		return g.Str(32, alnum)
	case "azure-storage":
		// 64 random bytes in standard base64: 86 characters and "==".
		return base64.StdEncoding.EncodeToString(g.bytes(64))
	case "azurekey":
		return g.Str(86, b64c) + "=="
	}
	panic("secretcorpus: unknown secret kind " + kind)
}

// opensshHeader is the fixed start of an unencrypted OpenSSH key's base64
// ("openssh-key-v1", cipher and kdf "none", one key, "ssh-e…").
const opensshHeader = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"

// FillNegative replaces the {{uuid}}, {{sha1}}, {{sha256}}, {{md5}},
// {{hex:N}} and {{b64:N}} tokens of a negative record with random values;
// other {{...}} text stays as it is.
func (g *Secrets) FillNegative(body string) string {
	var b strings.Builder
	for {
		i := strings.Index(body, "{{")
		if i < 0 {
			b.WriteString(body)
			return b.String()
		}
		j := strings.Index(body[i:], "}}")
		if j < 0 {
			b.WriteString(body)
			return b.String()
		}
		b.WriteString(body[:i])
		tok := body[i+2 : i+j]
		body = body[i+j+2:]
		kind, arg, _ := strings.Cut(tok, ":")
		n, _ := strconv.Atoi(arg)
		switch kind {
		case "uuid":
			b.WriteString(g.UUID())
		case "sha1":
			b.WriteString(g.Str(40, hexd))
		case "sha256":
			b.WriteString(g.Str(64, hexd))
		case "md5":
			b.WriteString(g.Str(32, hexd))
		case "hex":
			b.WriteString(g.Str(n, hexd))
		case "b64":
			b.WriteString(g.Str(n, b64c))
		default: // not ours, e.g. ${{ secrets.X }}: keep it
			b.WriteString("{{" + tok + "}}")
		}
	}
}

// fixedPrefix returns how many leading bytes every secret of kind shares
// (its literal prefix: "ghp_", a JWT's header, a webhook's URL), found by
// comparing samples.
func fixedPrefix(kind string) int {
	g := NewSecrets(uint64(len(kind)) * 7919)
	a, b, c := g.Make(kind), g.Make(kind), g.Make(kind)
	n := 0
	for n < len(a) && n < len(b) && n < len(c) && a[n] == b[n] && a[n] == c[n] {
		n++
	}
	return n
}

func (g *Secrets) pick(list ...string) string { return list[g.r.IntN(len(list))] }

func (g *Secrets) chance(p float64) bool { return g.r.Float64() < p }
