package event

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sample is a value of type t that is nowhere a zero value.
func sample(t Type) Value {
	switch t {
	case TypeString:
		return Value{Str: "x"}
	case TypeInt:
		return Value{Int: 3}
	case TypeBool:
		return Value{Bool: true}
	case TypeStrings:
		return Value{Strs: []string{"a", "b"}}
	case TypeTime:
		return Value{Time: time.Date(2025, 3, 1, 13, 4, 5, 0, time.UTC)}
	case TypeDuration:
		return Value{Int: int64(1500 * time.Millisecond)}
	case TypeAddrPort:
		return Value{Addr: netip.MustParseAddrPort("127.0.0.2:443")}
	case TypeAddrs:
		return Value{Any: []netip.Addr{netip.MustParseAddr("::1")}}
	case TypeHeader:
		return Value{Any: map[string][]string{"Accept": {"*/*"}}}
	case TypeChanges:
		return Value{Any: &Changes{Headers: []string{"Traceparent"}}}
	case TypeToolCalls:
		return Value{Any: []ToolCall{{ID: "t1", Name: "bash"}}}
	case TypeInts:
		return Value{Any: []int{1, 2}}
	}
	panic("no sample of type " + string(rune('0'+t)))
}

var cmpValue = cmp.Options{
	cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
}

// leaves lists the members of an event that hold what happened: the
// event's own, its verdict's, and those of every payload it has, each
// named as "HTTP.Method" (the event's own by their name alone), with
// whether each is set.
func leaves(e *Event) map[string]bool {
	out := map[string]bool{}
	ev := reflect.ValueOf(e).Elem()
	for i := range ev.NumField() {
		sf, fv := ev.Type().Field(i), ev.Field(i)
		switch {
		case sf.Name == "Verdict":
			for j := range fv.NumField() {
				out["Verdict."+fv.Type().Field(j).Name] = !fv.Field(j).IsZero()
			}
		case sf.Type.Kind() == reflect.Pointer && sf.Type.Elem().Kind() == reflect.Struct:
			st := sf.Type.Elem()
			for j := range st.NumField() {
				set := false
				if !fv.IsNil() {
					set = !fv.Elem().Field(j).IsZero()
				}
				out[sf.Name+"."+st.Field(j).Name] = set
			}
		default:
			out[sf.Name] = !fv.IsZero()
		}
	}
	return out
}

// TestFieldsCoverEvents holds Fields to the event types: every member of
// an event (its own, its verdict's, each payload's) is set by exactly one
// Field, which reads back what it set. A member added to the event types
// without a Field fails here.
func TestFieldsCoverEvents(t *testing.T) {
	fs := Fields()
	owner := map[string]string{} // member → the Field that sets it
	for i := range fs {
		f := &fs[i]
		e := &Event{}
		if _, ok := f.Get(e); ok && strings.Contains(f.Name, ".") {
			t.Errorf("%s: an event without its payload has it", f.Name)
		}
		want := sample(f.Type)
		f.Set(e, want)
		var set []string
		for m, isSet := range leaves(e) {
			if isSet {
				set = append(set, m)
			}
		}
		if len(set) != 1 {
			t.Errorf("%s: Set sets %v, want exactly one member", f.Name, set)
			continue
		}
		if prev, ok := owner[set[0]]; ok {
			t.Errorf("%s sets %s, which %s sets too", f.Name, set[0], prev)
		}
		owner[set[0]] = f.Name
		got, ok := f.Get(e)
		if !ok {
			t.Errorf("%s: Get after Set says the event lacks it", f.Name)
		}
		if diff := cmp.Diff(want, got, cmpValue); diff != "" {
			t.Errorf("%s: Get after Set (-want +got):\n%s", f.Name, diff)
		}
	}
	var all Event
	all.Process, all.SessionInfo, all.Connect, all.DNS, all.TLS = &Process{}, &Session{}, &Connect{}, &DNS{}, &TLS{}
	all.HTTP, all.LLM, all.File, all.Exec, all.Policy = &HTTP{}, &LLM{}, &File{}, &Exec{}, &PolicyReload{}
	for m := range leaves(&all) {
		if _, ok := owner[m]; !ok {
			t.Errorf("event member %s has no Field: add one to Fields (event/fields.go), saying who sees it", m)
		}
	}
}

// TestFieldsNames checks the names each form reads fields by: unique
// names, keys unique within a kind of event in each flat form, a key for
// each field in a flat form, CEL variables unique, span event attributes
// only on the kinds traced as span events.
func TestFieldsNames(t *testing.T) {
	fs := Fields()
	names, cels := map[string]bool{}, map[string]bool{}
	type slot struct {
		use     Use
		kind    Kind
		key     string
		process bool
	}
	keys := map[slot]string{}
	traced := []Kind{KindConnect, KindDNS, KindTLS, KindFile, KindExec, KindWS}
	for _, f := range fs {
		if names[f.Name] {
			t.Errorf("two fields named %s", f.Name)
		}
		names[f.Name] = true
		if f.CEL != "" {
			if cels[f.CEL] {
				t.Errorf("two fields are the CEL variable %s", f.CEL)
			}
			cels[f.CEL] = true
		}
		if f.In != 0 && f.Key == "" {
			t.Errorf("%s is in a flat form without a key", f.Name)
		}
		if f.Attr != "" && (f.Kinds == nil || slices.ContainsFunc(f.Kinds, func(k Kind) bool { return !slices.Contains(traced, k) })) {
			t.Errorf("%s has a span event attribute but belongs to kinds %v, not only those traced as span events", f.Name, f.Kinds)
		}
		for _, use := range []Use{InLog, InPlugin} {
			if f.In&use == 0 {
				continue
			}
			for _, k := range Kinds {
				if !f.InFlat(k) {
					continue
				}
				s := slot{use, k, f.Key, f.IsProcess()}
				if prev, ok := keys[s]; ok {
					t.Errorf("%s and %s both have key %q in %s events", prev, f.Name, f.Key, k)
				}
				keys[s] = f.Name
			}
		}
	}
}

// flatForm is a flat form of every field the audit log holds, as the
// audit log's record has them.
type flatForm struct {
	Time      time.Time `json:"time"`
	Kind      Kind      `json:"kind"`
	Session   string    `json:"session,omitempty"`
	Verdict   Action    `json:"verdict"`
	Rule      string    `json:"rule"`
	Reason    string    `json:"reason"`
	DecidedBy DecidedBy `json:"decided_by"`
	Dst       string    `json:"dst"`
	Host      string    `json:"host"`
	Port      uint16    `json:"port"`
	Transport string    `json:"transport"`
	Via       string    `json:"via"`
	Relay     string    `json:"relay"`
	Answers   []string  `json:"answers"`
	Name      string    `json:"name"`
	QType     string    `json:"qtype"`
	Rcode     string    `json:"rcode"`
	Agent     string    `json:"agent"`
	Command   []string  `json:"command"`
	RootPID   int       `json:"root_pid"`
	AgentUID  int       `json:"agent_uid"`
	TTY       string    `json:"tty"`
	ParentPID int       `json:"parent_pid"`
	Mode      string    `json:"mode"`
	Container string    `json:"container_id"`
	Runtime   string    `json:"container_runtime"`
	Pod       string    `json:"pod_uid"`
	ExitCode  *int      `json:"exit_code"`
	Duration  *int64    `json:"duration_ms"`
	Workdir   string    `json:"workdir"`
	Home      string    `json:"home"`
}

// TestFlat copies events to a flat form and back: the conversions hold,
// and only the fields of the event's kind are copied.
func TestFlat(t *testing.T) {
	fl, err := NewFlat[flatForm](Fields(), InLog, false)
	if err == nil {
		t.Fatal("a flat form without the http members was planned")
	}
	var onlyDNSAndConnect []Field
	for _, f := range Fields() {
		if !f.IsProcess() && (f.Kinds == nil || f.Of(KindConnect) || f.Of(KindDNS) || f.Of(KindSessionEnd)) {
			onlyDNSAndConnect = append(onlyDNSAndConnect, f)
		}
	}
	if fl, err = NewFlat[flatForm](onlyDNSAndConnect, InLog, false); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 3, 1, 13, 4, 5, 123, time.FixedZone("x", 3600))
	tests := []struct {
		e    *Event
		want flatForm
		back *Event // e as the form holds it, when not e
	}{
		{
			e: &Event{Time: t0, Kind: KindConnect, Session: "s", Verdict: Verdict{Action: Allow, DecidedBy: DecidedByRule, Rule: "r"},
				Connect: &Connect{Dst: netip.MustParseAddrPort("[::1]:443"), Host: "h", Port: 443, Transport: TCP, Via: "connect"},
				DNS:     &DNS{Name: "not mine"}},
			want: flatForm{Time: t0.UTC(), Kind: KindConnect, Session: "s", Verdict: Allow, DecidedBy: DecidedByRule, Rule: "r",
				Dst: "[::1]:443", Host: "h", Port: 443, Transport: "tcp", Via: "connect"},
			back: &Event{Time: t0.UTC(), Kind: KindConnect, Session: "s", Verdict: Verdict{Action: Allow, DecidedBy: DecidedByRule, Rule: "r"},
				Connect: &Connect{Dst: netip.MustParseAddrPort("[::1]:443"), Host: "h", Port: 443, Transport: TCP, Via: "connect"}},
		},
		{
			e: &Event{Time: t0.UTC(), Kind: KindDNS, DNS: &DNS{Name: "n", Type: "A", Rcode: "NOERROR",
				Answers: []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("::1")}}},
			want: flatForm{Time: t0.UTC(), Kind: KindDNS, Name: "n", QType: "A", Rcode: "NOERROR", Answers: []string{"127.0.0.2", "::1"}},
		},
		{
			e: &Event{Time: t0.UTC(), Kind: KindSessionEnd, SessionInfo: &Session{Agent: "a", Command: []string{"c"}, RootPID: 9, Mode: "proxy",
				ContainerID: "c1", ContainerRuntime: "cri-o", PodUID: "p1", Duration: 1999 * time.Microsecond}},
			want: flatForm{Time: t0.UTC(), Kind: KindSessionEnd, Agent: "a", Command: []string{"c"}, RootPID: 9, Mode: "proxy",
				Container: "c1", Runtime: "cri-o", Pod: "p1", ExitCode: new(0), Duration: new(int64(1))},
			back: &Event{Time: t0.UTC(), Kind: KindSessionEnd, SessionInfo: &Session{Agent: "a", Command: []string{"c"}, RootPID: 9, Mode: "proxy",
				ContainerID: "c1", ContainerRuntime: "cri-o", PodUID: "p1", Duration: time.Millisecond}},
		},
		{
			e:    &Event{Time: t0.UTC(), Kind: KindConnect, Connect: &Connect{Host: "no address yet"}},
			want: flatForm{Time: t0.UTC(), Kind: KindConnect, Host: "no address yet"},
		},
		{
			// The working tree and home are session_start's only
			// (FlatKinds), though every event carries them.
			e:    &Event{Time: t0.UTC(), Kind: KindSessionStart, SessionInfo: &Session{Agent: "a", Workdir: "/w", Home: "/h"}},
			want: flatForm{Time: t0.UTC(), Kind: KindSessionStart, Agent: "a", Workdir: "/w", Home: "/h"},
		},
		{
			e:    &Event{Time: t0.UTC(), Kind: KindConnect, Connect: &Connect{Host: "h"}, SessionInfo: &Session{Workdir: "/w", Home: "/h"}},
			want: flatForm{Time: t0.UTC(), Kind: KindConnect, Host: "h"},
			back: &Event{Time: t0.UTC(), Kind: KindConnect, Connect: &Connect{Host: "h"}},
		},
	}
	for _, tt := range tests {
		t.Run(string(tt.e.Kind), func(t *testing.T) {
			var got flatForm
			fl.Fill(&got, tt.e)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Fill (-want +got):\n%s", diff)
			}
			back := &Event{Kind: got.Kind}
			fl.Read(&got, back)
			want := tt.back
			if want == nil {
				want = tt.e
			}
			if diff := cmp.Diff(want, back, cmpValue); diff != "" {
				t.Errorf("Read (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewFlatRefuses(t *testing.T) {
	type wrongType struct {
		Time time.Time `json:"time"`
		Kind int       `json:"kind"`
	}
	fs := Fields()[:2] // time, kind
	if _, err := NewFlat[wrongType](fs, InLog, false); err == nil || !strings.Contains(err.Error(), "kind") {
		t.Errorf("NewFlat with an int for kind = %v, want an error naming kind", err)
	}
	type missing struct {
		Time time.Time `json:"time"`
	}
	if _, err := NewFlat[missing](fs, InLog, false); err == nil || !strings.Contains(err.Error(), `key "kind"`) {
		t.Errorf("NewFlat without a kind member = %v, want an error naming its key", err)
	}
	if _, err := NewFlat[int](fs, InLog, false); err == nil {
		t.Error("NewFlat of an int succeeded")
	}
}
