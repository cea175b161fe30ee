package plugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

// TestEventHoldsEveryPluginField plans the plugins' flat forms: every
// field the event's projection gives plugins (event.InPlugin) has a
// member of Event (or of its Process) under its key, of a type that holds
// it.
func TestEventHoldsEveryPluginField(t *testing.T) {
	fs := event.Fields()
	ev, err := event.NewFlat[Event](fs, event.InPlugin, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"process"}, ev.Unused()); diff != "" {
		t.Errorf("members of Event no field fills (-want +got):\n%s", diff)
	}
	proc, err := event.NewFlat[Process](fs, event.InPlugin, true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string(nil), proc.Unused()); diff != "" {
		t.Errorf("members of Process no field fills (-want +got):\n%s", diff)
	}
}
