package telemetry

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

// TestRecordHoldsEveryLogField plans the audit log's flat forms: every
// field the event's projection puts in the log (event.InLog) has a member
// of Record (or of its Process) under its key, of a type that holds it.
// A member of Record that no field fills is one of the record's own
// (the process and the id that names it, truncated, a file_reads record's
// fields) or a mistake.
func TestRecordHoldsEveryLogField(t *testing.T) {
	fs := event.Fields()
	rec, err := event.NewFlat[Record](fs, event.InLog, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"count", "pid", "process", "process_id", "reads", "truncated", "until"}, rec.Unused()); diff != "" {
		t.Errorf("members of Record no field fills (-want +got):\n%s", diff)
	}
	proc, err := event.NewFlat[Process](fs, event.InLog, true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string(nil), proc.Unused()); diff != "" {
		t.Errorf("members of Process no field fills (-want +got):\n%s", diff)
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
