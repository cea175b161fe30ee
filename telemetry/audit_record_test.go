package telemetry

import (
	"testing"

	"github.com/chaperone-dev/chaperone/event"
)

// TestRecordHoldsEveryLogField plans the audit log's flat forms: every
// field the event's projection puts in the log (event.InLog) has a member
// of Record (or of its Process) under its key, of a type that holds it.
func TestRecordHoldsEveryLogField(t *testing.T) {
	fs := event.Fields()
	if _, err := event.NewFlat[Record](fs, event.InLog, false); err != nil {
		t.Error(err)
	}
	if _, err := event.NewFlat[Process](fs, event.InLog, true); err != nil {
		t.Error(err)
	}
}

// TestActionAttrsSpecialKeys checks that the attributes actionAttrs treats
// apart are still those of fields of the projection.
func TestActionAttrsSpecialKeys(t *testing.T) {
	attrs := map[string]bool{}
	for _, f := range event.Fields() {
		attrs[f.Attr] = true
	}
	for _, k := range []string{keyArgs, keyProgram, keyDNSAnswer} {
		if !attrs[k] {
			t.Errorf("no field of the projection has the attribute %s", k)
		}
	}
}
