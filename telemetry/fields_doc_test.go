package telemetry

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/event"
)

// TestFieldsDocumented keeps docs/events.md's table of fields per kind in
// step with the audit log: every field a record holds for a kind has a
// row (a kind cell left empty is the row above's).
func TestFieldsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "| kind | field | type | meaning |")
	if !ok {
		t.Fatal("docs/events.md has no table of fields per kind")
	}
	code := regexp.MustCompile("`([^`]+)`")
	documented := map[[2]string]bool{}
	var kinds []string
	for _, line := range strings.Split(table, "\n")[2:] {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 4 {
			break
		}
		if k := strings.TrimSpace(cells[1]); k != "" {
			kinds = nil
			for _, m := range code.FindAllStringSubmatch(k, -1) {
				kinds = append(kinds, m[1])
			}
		}
		for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
			for _, k := range kinds {
				documented[[2]string{k, m[1]}] = true
			}
		}
	}
	for _, f := range event.Fields() {
		kinds := f.Kinds
		if f.FlatKinds != nil {
			kinds = f.FlatKinds
		}
		if f.In&event.InLog == 0 || f.Key == "" || kinds == nil || f.IsProcess() {
			continue
		}
		for _, k := range kinds {
			if !documented[[2]string{string(k), f.Key}] {
				t.Errorf("docs/events.md has no row for %s's field %q (%s)", k, f.Key, f.Name)
			}
		}
	}
}
