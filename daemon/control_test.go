package daemon

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		line    string
		want    Request
		wantErr string
	}{
		{`{"op":"sessions"}`, Request{Op: "sessions"}, ""},
		{`{"op":"adopt","pid":42,"agent":"claude"}`, Request{Op: "adopt", PID: 42, Agent: "claude"}, ""},
		{`{"op":"run"}` + "\n", Request{Op: "run"}, ""},
		{`{"op":"adopt"}`, Request{}, "pid 0 is not a process id"},
		{`{"op":"adopt","pid":"one"}`, Request{}, "pid"},
		{`{"op":"kill"}`, Request{}, `unknown op "kill"`},
		{`{}`, Request{}, "no op"},
		{`{"op":"sessions","extra":1}`, Request{}, `unknown field "extra"`},
		{`not json`, Request{}, "not a JSON object"},
		{``, Request{}, "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			got, err := ParseRequest([]byte(tt.line))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseRequest error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseRequest (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseRequest: what it accepts is a valid request that encoding/json
// reads the same way.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{`{"op":"sessions"}`, `{"op":"adopt","pid":1}`, `{"op":"run","agent":"x"}`, `{`, `[]`, `{"op":"adopt","pid":-1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := ParseRequest(b)
		if err != nil {
			return
		}
		switch req.Op {
		case "sessions", "run":
		case "adopt":
			if req.PID <= 0 {
				t.Fatalf("accepted adopt of pid %d", req.PID)
			}
		default:
			t.Fatalf("accepted op %q", req.Op)
		}
		var std Request
		if err := json.Unmarshal(b, &std); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", b, err)
		}
		if diff := cmp.Diff(std, req); diff != "" {
			t.Errorf("(-encoding/json +ParseRequest):\n%s", diff)
		}
	})
}
