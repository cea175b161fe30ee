package event

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVerdictZeroValueDenies(t *testing.T) {
	var v Verdict
	if v.Action != Deny || v.Allowed() {
		t.Fatalf("zero Verdict = %v, want a deny", v)
	}
	if got, want := v.String(), "deny by default"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestVerdictJSON(t *testing.T) {
	tests := []struct {
		v    Verdict
		json string
	}{
		{Verdict{}, `{"verdict":"deny","decided_by":"default"}`},
		{Verdict{Action: Allow, DecidedBy: DecidedByRule, Rule: "docs"}, `{"verdict":"allow","rule":"docs","decided_by":"rule"}`},
		{Verdict{Action: Rewrite, DecidedBy: DecidedByPlugin, Reason: "redacted"}, `{"verdict":"rewrite","reason":"redacted","decided_by":"plugin"}`},
		{Verdict{Action: Ask, DecidedBy: DecidedByHuman}, `{"verdict":"ask","decided_by":"human"}`},
		{Verdict{Action: Deny, DecidedBy: DecidedByJudge, Rule: "judge", Reason: "exfiltration"}, `{"verdict":"deny","rule":"judge","reason":"exfiltration","decided_by":"judge"}`},
	}
	for _, tt := range tests {
		t.Run(tt.json, func(t *testing.T) {
			b, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.json, string(b)); diff != "" {
				t.Errorf("Marshal (-want +got):\n%s", diff)
			}
			var back Verdict
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.v, back); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseRejectsUnknownWords(t *testing.T) {
	if _, err := ParseAction("permit"); err == nil {
		t.Error(`ParseAction("permit") succeeded`)
	}
	if _, err := ParseDecidedBy("oracle"); err == nil {
		t.Error(`ParseDecidedBy("oracle") succeeded`)
	}
	var v Verdict
	if err := json.Unmarshal([]byte(`{"verdict":"maybe"}`), &v); err == nil {
		t.Error("unmarshal of an unknown verdict succeeded")
	}
	if got := Action(9).String(); got != "action(9)" {
		t.Errorf("Action(9) = %q", got)
	}
}

func TestKindValid(t *testing.T) {
	for _, k := range Kinds {
		if !k.Valid() {
			t.Errorf("%q not valid", k)
		}
	}
	if Kind("net").Valid() {
		t.Error(`"net" is valid`)
	}
}

func TestEnforced(t *testing.T) {
	tests := []struct {
		in, want Verdict
	}{
		{Verdict{Action: Allow, Rule: "r"}, Verdict{Action: Allow, Rule: "r"}},
		{Verdict{Action: Rewrite}, Verdict{Action: Rewrite}},
		{Verdict{}, Verdict{}},
		{Verdict{Action: Ask, Rule: "confirm", Reason: "a person decides", DecidedBy: DecidedByRule},
			Verdict{Action: Deny, Rule: "confirm", Reason: "asking is not available here, so denied; a person decides", DecidedBy: DecidedByRule}},
		{Verdict{Action: Action(7), Rule: "x"}, Verdict{Action: Deny, Rule: "x", Reason: "unknown verdict action(7)"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.in.Enforced()); diff != "" {
			t.Errorf("%v.Enforced() (-want +got):\n%s", tt.in, diff)
		}
	}
}
