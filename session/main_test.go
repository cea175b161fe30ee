package session

import (
	"os"
	"testing"

	"github.com/chaperone-dev/chaperone/internal/privdrop"
)

// TestMain lets the test binary stand in for chaperone: Run starts the
// agent through the program itself (privdrop's shim), as chaperone's main
// does.
func TestMain(m *testing.M) {
	if privdrop.RunShim() {
		return
	}
	os.Exit(m.Run())
}
