package upstream

import (
	"crypto/rand"
	"math/big"
)

// FakeGitHubToken returns a secret shaped like a GitHub personal access
// token ("ghp_" and 36 letters and digits), made anew for each call, so
// that no real-looking key lives in test sources.
func FakeGitHubToken() string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 36)
	for i := range b {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(alnum))))
		if err != nil {
			panic("upstream: no randomness: " + err.Error())
		}
		b[i] = alnum[n.Int64()]
	}
	return "ghp_" + string(b)
}
