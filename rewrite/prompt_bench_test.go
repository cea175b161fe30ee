package rewrite

import (
	"crypto/sha256"
	"testing"

	"github.com/chaperone-dev/chaperone/internal/secretcorpus"
	"github.com/chaperone-dev/chaperone/rewrite/secrets"
)

// BenchmarkLogPromptCorpus measures what an llm event's prompt adds to
// the proxy's work on an LLM call that is redacted (Inspect, RedactBody),
// side by side in one run (CPU time per op is the steadier figure on a
// busy machine), over the secret corpus's bodies (every API
// shape, secrets in every layout), a Redactor per session:
// go test -run '^$' -bench LogPromptCorpus ./rewrite
func BenchmarkLogPromptCorpus(b *testing.B) {
	sessions := secretcorpus.Generate(secretcorpus.Options{Seed: 1})
	var size int64
	for _, s := range sessions {
		for _, r := range s.Requests {
			size += int64(len(r.Body))
		}
	}
	sc, err := secrets.NewScanner(secrets.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, prompt := range []bool{false, true} {
		name := "work=inspect+redact"
		if prompt {
			name += "+prompt"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				for _, s := range sessions {
					key := sha256.Sum256([]byte(s.Name))
					red := secrets.NewRedactor(sc, key[:])
					for _, r := range s.Requests {
						api, _ := DetectAPI(r.Provider.Host(), r.Provider.Path(), nil)
						req, _ := Inspect(api, r.Provider.Path(), r.Body)
						RedactBody(r.Body, red)
						if prompt {
							LogPrompt(req.Prompt, red, 2000)
						}
					}
				}
			}
			reportCPU(b, cpu0)
		})
	}
}
