package inject

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func testIdentity() Identity {
	return Identity{
		Session: "ses_01HZX3",
		Agent:   "claude",
		Lineage: []string{"bash", "claude", "node", "curl"},
		TraceID: [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	}
}

func TestIdentityHeaders(t *testing.T) {
	tests := []struct {
		name    string
		presets []string
		id      Identity
		want    http.Header
	}{
		{"none", nil, testIdentity(), http.Header{}},
		{"chaperone", []string{"chaperone"}, testIdentity(), http.Header{
			"X-Chaperone-Session": {"ses_01HZX3"},
			"X-Chaperone-Agent":   {"claude"},
			"X-Chaperone-Lineage": {"bash>claude>node>curl"},
		}},
		{"chaperone without lineage", []string{"chaperone"}, Identity{Session: "s", Agent: "a"}, http.Header{
			"X-Chaperone-Session": {"s"},
			"X-Chaperone-Agent":   {"a"},
		}},
		{"with a user", []string{"chaperone", "litellm"}, Identity{Session: "s", Agent: "a", User: "alice,bob"}, http.Header{
			"X-Chaperone-Session":  {"s"},
			"X-Chaperone-Agent":    {"a"},
			"X-Chaperone-User":     {"alice,bob"},
			"X-Litellm-Session-Id": {"s"},
			"X-Litellm-Tags":       {"agent:a,user:alice_bob,chaperone"},
		}},
		{"litellm", []string{"litellm"}, testIdentity(), http.Header{
			"X-Litellm-Session-Id": {"ses_01HZX3"},
			"X-Litellm-Tags":       {"agent:claude,chaperone"},
		}},
		{"portkey", []string{"portkey"}, testIdentity(), http.Header{
			"X-Portkey-Trace-Id": {"ses_01HZX3"},
			"X-Portkey-Metadata": {`{"_user":"claude","session":"ses_01HZX3","agent":"claude"}`},
		}},
		{"helicone", []string{"helicone"}, testIdentity(), http.Header{
			"Helicone-Session-Id":     {"ses_01HZX3"},
			"Helicone-Session-Name":   {"chaperone"},
			"Helicone-Session-Path":   {"/bash/claude/node/curl"},
			"Helicone-User-Id":        {"claude"},
			"Helicone-Property-Agent": {"claude"},
		}},
		{"helicone without lineage", []string{"helicone"}, Identity{Session: "s", Agent: "codex"}, http.Header{
			"Helicone-Session-Id":     {"s"},
			"Helicone-Session-Name":   {"chaperone"},
			"Helicone-Session-Path":   {"/codex"},
			"Helicone-User-Id":        {"codex"},
			"Helicone-Property-Agent": {"codex"},
		}},
		{"cloudflare", []string{"cloudflare"}, testIdentity(), http.Header{
			"Cf-Aig-Metadata": {`{"session":"ses_01HZX3","agent":"claude"}`},
		}},
		{"w3c", []string{"w3c"}, testIdentity(), http.Header{
			"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			"Baggage":     {"chaperone.session=ses_01HZX3,chaperone.agent=claude"},
		}},
		{"w3c baggage escaping", []string{"w3c"}, Identity{Session: `a b,c;d"e\f%g=h`, Agent: "é", TraceID: [16]byte{1}, SpanID: [8]byte{2}}, http.Header{
			"Traceparent": {"00-01000000000000000000000000000000-0200000000000000-01"},
			"Baggage":     {"chaperone.session=a%20b%2Cc%3Bd%22e%5Cf%25g=h,chaperone.agent=_"},
		}},
		{"several, case-insensitive names", []string{"CHAPERONE", "cloudflare"}, Identity{Session: "s", Agent: "a"}, http.Header{
			"X-Chaperone-Session": {"s"},
			"X-Chaperone-Agent":   {"a"},
			"Cf-Aig-Metadata":     {`{"session":"s","agent":"a"}`},
		}},
		{"empty names read unknown", []string{"chaperone", "litellm"}, Identity{Session: " \r\n", Lineage: []string{""}}, http.Header{
			"X-Chaperone-Session":  {"__"},
			"X-Chaperone-Agent":    {"unknown"},
			"X-Litellm-Session-Id": {"__"},
			"X-Litellm-Tags":       {"agent:unknown,chaperone"},
		}},
		{"header injection through names", []string{"chaperone", "litellm", "portkey", "cloudflare"}, Identity{
			Session: "s1\r\nX-Evil: 1",
			Agent:   "bot,\"x\"\nSet-Cookie: a=b",
			Lineage: []string{"sh\r\nX-Evil: 2", "a>b", "py thon"},
		}, http.Header{
			"X-Chaperone-Session":  {"s1__X-Evil: 1"},
			"X-Chaperone-Agent":    {`bot,"x"_Set-Cookie: a=b`},
			"X-Chaperone-Lineage":  {"sh__X-Evil__2>a_b>py_thon"},
			"X-Litellm-Session-Id": {"s1__X-Evil: 1"},
			"X-Litellm-Tags":       {`agent:bot_"x"_Set-Cookie: a=b,chaperone`},
			"X-Portkey-Trace-Id":   {"s1__X-Evil: 1"},
			"X-Portkey-Metadata":   {`{"_user":"bot,\"x\"_Set-Cookie: a=b","session":"s1__X-Evil: 1","agent":"bot,\"x\"_Set-Cookie: a=b"}`},
			"Cf-Aig-Metadata":      {`{"session":"s1__X-Evil: 1","agent":"bot,\"x\"_Set-Cookie: a=b"}`},
		}},
		{"long values clipped", []string{"chaperone", "portkey"}, Identity{
			Session: strings.Repeat("s", 300),
			Agent:   "a",
			Lineage: append([]string{"init"}, strings.Split(strings.Repeat("proc-name-xyz,", 30), ",")...),
		}, http.Header{
			"X-Chaperone-Session": {strings.Repeat("s", 256)},
			"X-Chaperone-Agent":   {"a"},
			"X-Chaperone-Lineage": {"init>...>" + strings.TrimSuffix(strings.Repeat("proc-name-xyz>", 17), ">")},
			"X-Portkey-Trace-Id":  {strings.Repeat("s", 128)},
			"X-Portkey-Metadata":  {`{"_user":"a","session":"` + strings.Repeat("s", 128) + `","agent":"a"}`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := IdentityHeaders(tt.presets, tt.id)
			if err != nil {
				t.Fatalf("IdentityHeaders: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("IdentityHeaders (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIdentityHeadersErrors(t *testing.T) {
	tests := []struct {
		name    string
		presets []string
		id      Identity
		want    string
	}{
		{"unknown preset", []string{"chaperone", "langfuse"}, testIdentity(), `inject: unknown identity preset "langfuse"`},
		{"zero trace id", []string{"w3c"}, Identity{SpanID: [8]byte{1}}, "inject: w3c preset: zero trace id"},
		{"zero span id", []string{"w3c"}, Identity{TraceID: [16]byte{1}}, "inject: w3c preset: zero span id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := IdentityHeaders(tt.presets, tt.id)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("IdentityHeaders = %v, %v; want error %q", h, err, tt.want)
			}
			orig := http.Header{"Traceparent": {"agent's"}}
			if _, err := ApplyIdentity(orig, tt.presets, tt.id); err == nil {
				t.Fatalf("ApplyIdentity: no error")
			}
			if diff := cmp.Diff(http.Header{"Traceparent": {"agent's"}}, orig); diff != "" {
				t.Errorf("ApplyIdentity changed the header on error (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := ApplyIdentity(nil, []string{"chaperone"}, testIdentity()); err == nil {
		t.Errorf("ApplyIdentity(nil header): no error")
	}
}

func TestApplyIdentity(t *testing.T) {
	id := Identity{Session: "s", Agent: "a", TraceID: [16]byte{1}, SpanID: [8]byte{2}}
	tests := []struct {
		name      string
		presets   []string
		header    http.Header
		want      http.Header
		wantNames []string
	}{
		{
			name:    "spoofed headers replaced, others kept",
			presets: []string{"chaperone", "helicone"},
			header: http.Header{
				"X-Chaperone-Session":     {"forged"},
				"x-chaperone-agent":       {"forged"},
				"X-CHAPERONE-LINEAGE":     {"forged"},
				"X-Chaperone-Verdict":     {"allow"},
				"helicone-user-id":        {"forged", "twice"},
				"Helicone-Property-Agent": {"forged"},
				"Helicone-Property-Team":  {"kept"},
				"Authorization":           {"Bearer x"},
				"Traceparent":             {"kept: w3c is not asked for"},
			},
			want: http.Header{
				"X-Chaperone-Session":     {"s"},
				"X-Chaperone-Agent":       {"a"},
				"Helicone-Session-Id":     {"s"},
				"Helicone-Session-Name":   {"chaperone"},
				"Helicone-Session-Path":   {"/a"},
				"Helicone-User-Id":        {"a"},
				"Helicone-Property-Agent": {"a"},
				"Helicone-Property-Team":  {"kept"},
				"Authorization":           {"Bearer x"},
				"Traceparent":             {"kept: w3c is not asked for"},
			},
			wantNames: []string{"Helicone-Property-Agent", "Helicone-Session-Id", "Helicone-Session-Name",
				"Helicone-Session-Path", "Helicone-User-Id", "X-Chaperone-Agent", "X-Chaperone-Session"},
		},
		{
			name:    "w3c drops the agent's tracestate",
			presets: []string{"w3c"},
			header:  http.Header{"traceparent": {"00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01"}, "Tracestate": {"vendor=x"}, "baggage": {"user=evil"}},
			want: http.Header{
				"Traceparent": {"00-01000000000000000000000000000000-0200000000000000-01"},
				"Baggage":     {"chaperone.session=s,chaperone.agent=a"},
			},
			wantNames: []string{"Baggage", "Traceparent"},
		},
		{
			name:      "gateway presets",
			presets:   []string{"litellm", "portkey", "cloudflare"},
			header:    http.Header{"x-litellm-tags": {"admin"}, "X-Portkey-Metadata": {`{"_user":"root"}`}, "cf-aig-metadata": {"{}"}, "X-Portkey-Api-Key": {"kept"}},
			want:      mustIdentity(t, []string{"litellm", "portkey", "cloudflare"}, id, http.Header{"X-Portkey-Api-Key": {"kept"}}),
			wantNames: []string{"Cf-Aig-Metadata", "X-Litellm-Session-Id", "X-Litellm-Tags", "X-Portkey-Metadata", "X-Portkey-Trace-Id"},
		},
		{
			name:      "no presets",
			presets:   nil,
			header:    http.Header{"X-Chaperone-Session": {"forged"}},
			want:      http.Header{"X-Chaperone-Session": {"forged"}},
			wantNames: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names, err := ApplyIdentity(tt.header, tt.presets, id)
			if err != nil {
				t.Fatalf("ApplyIdentity: %v", err)
			}
			if diff := cmp.Diff(tt.want, tt.header); diff != "" {
				t.Errorf("header (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantNames, names); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
		})
	}
}

// mustIdentity returns IdentityHeaders merged over extra.
func mustIdentity(t *testing.T, presets []string, id Identity, extra http.Header) http.Header {
	t.Helper()
	h, err := IdentityHeaders(presets, id)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range extra {
		h[k] = v
	}
	return h
}
