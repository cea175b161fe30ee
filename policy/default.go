package policy

import (
	_ "embed"
	"fmt"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultPolicyYAML returns the text of the built-in default policy.
func DefaultPolicyYAML() []byte { return append([]byte(nil), defaultYAML...) }

// DefaultPolicy returns the built-in default policy: protect credentials,
// redact secrets from prompts, allow the rest.
func DefaultPolicy() *Policy {
	p, err := Parse("default.yaml", defaultYAML)
	if err != nil {
		// A test parses the embedded file; reaching this is a build error.
		panic(fmt.Sprintf("policy: the built-in default policy does not load: %v", err))
	}
	return p
}
