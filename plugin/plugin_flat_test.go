package plugin

import (
	"testing"

	"github.com/chaperone-dev/chaperone/event"
)

// TestEventHoldsEveryPluginField plans the plugins' flat forms: every
// field the event's projection gives plugins (event.InPlugin) has a
// member of Event (or of its Process) under its key, of a type that holds
// it.
func TestEventHoldsEveryPluginField(t *testing.T) {
	fs := event.Fields()
	if _, err := event.NewFlat[Event](fs, event.InPlugin, false); err != nil {
		t.Error(err)
	}
	if _, err := event.NewFlat[Process](fs, event.InPlugin, true); err != nil {
		t.Error(err)
	}
}
