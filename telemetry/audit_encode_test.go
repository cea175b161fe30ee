package telemetry

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/google/go-cmp/cmp"
)

// stdLine is r as encoding/json writes it in the audit log.
func stdLine(t testing.TB, r *Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		t.Fatalf("encoding/json: %v", err)
	}
	return buf.Bytes()
}

// checkEncoding holds appendRecord to encoding/json: the same bytes, and
// a line that decodes to the record encoding/json's line decodes to.
func checkEncoding(t testing.TB, r *Record) {
	t.Helper()
	want := stdLine(t, r)
	got, ok := appendRecord(nil, r)
	if !ok {
		t.Fatalf("appendRecord refused a record encoding/json encodes:\n%s", want)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("appendRecord differs from encoding/json:\n got %s\nwant %s", got, want)
	}
	var fromGot, fromWant Record
	if err := json.Unmarshal(want, &fromWant); err != nil {
		return // an action or decider out of range: the bytes are all there is to compare
	}
	if err := json.Unmarshal(got, &fromGot); err != nil {
		t.Fatalf("appendRecord's line does not decode: %v\n%s", err, got)
	}
	if d := cmp.Diff(fromWant, fromGot); d != "" {
		t.Fatalf("decoded record (-want +got):\n%s", d)
	}
}

// trickyStrings are values that exercise every escaping rule.
var trickyStrings = []string{
	"", "a", "plain text", `"quoted"`, `back\slash`, "\b\f\n\r\t", "\x00\x01\x1f\x7f", "<&>",
	"é ü ∑ 😀", "\u2028\u2029", "\xff\xfe", "a\xc3", "\xed\xa0\x80", "https://h/p?q=1&r=<2>#f",
}

// randomRecord fills a Record with random values, strings from pool.
func randomRecord(rng *rand.Rand, pool []string) Record {
	s := func() string {
		if rng.IntN(3) == 0 {
			return ""
		}
		return pool[rng.IntN(len(pool))]
	}
	l := func() []string {
		n := rng.IntN(4)
		if n == 0 {
			if rng.IntN(2) == 0 {
				return []string{}
			}
			return nil
		}
		out := make([]string, n)
		for i := range out {
			out[i] = pool[rng.IntN(len(pool))]
		}
		return out
	}
	i64 := func() int64 {
		switch rng.IntN(3) {
		case 0:
			return 0
		case 1:
			return rng.Int64() - rng.Int64()
		}
		return rng.Int64N(1000)
	}
	zone := time.UTC
	if rng.IntN(4) == 0 {
		zone = time.FixedZone("", (rng.IntN(47)-23)*3600+rng.IntN(2)*1800)
	}
	r := Record{
		Time:      time.Unix(rng.Int64N(253402300799), rng.Int64N(1e9)).In(zone),
		Session:   s(),
		Kind:      event.Kind(s()),
		Verdict:   event.Action(rng.IntN(5)), // 4: out of range
		Rule:      s(),
		DecidedBy: event.DecidedBy(rng.IntN(6)), // 5: out of range
		Reason:    s(),
		Dst:       s(), Host: s(), Port: uint16(rng.IntN(3) * rng.IntN(65536)), Transport: s(), Via: s(), Relay: s(),
		SNI: s(), ALPN: l(), TLSVersion: s(), Intercepted: rng.IntN(2) == 0,
		ClientRejected: rng.IntN(2) == 0, Alert: s(), ClientRejectsCA: rng.IntN(2) == 0,
		Method: s(), URL: s(), Status: int(i64()), Proto: s(), Upgrade: s(), Secrets: l(), Error: s(),
		Provider: s(), Model: s(), Path: s(), Operation: s(), Stream: rng.IntN(2) == 0, ResponseModel: s(),
		InputTokens: i64(), OutputTokens: i64(), CacheReadTokens: i64(), CacheCreationTokens: i64(),
		FinishReasons: l(), Restored: int(i64()), WebSocket: rng.IntN(2) == 0, WSMessage: s(), WSUnparsed: int(i64()),
		Prompt: s(), PromptTruncated: rng.IntN(2) == 0, LatencyMS: i64(),
		Name: s(), QType: s(), Answers: l(), Rcode: s(),
		Access: s(), Op: s(), Target: s(),
		Argv: l(), Cwd: s(), Digest: s(), Program: s(), Interpreter: s(), Trigger: s(),
		Direction: s(), Opcode: s(), Size: i64(), Text: s(), TextTruncated: rng.IntN(2) == 0, MCPMethod: s(), MCPTool: s(),
		Agent: s(), Command: l(), RootPID: int(i64()), AgentUID: int(i64()), TTY: s(), ParentPID: int(i64()), Mode: s(),
		ContainerID: s(), ContainerRuntime: s(), PodUID: s(), Workdir: s(), Home: s(),
		Truncated: rng.IntN(2) == 0,
	}
	if rng.IntN(2) == 0 {
		r.Process = &Process{PID: int(i64()), PPID: int(i64()), Exe: s(), Argv: l(), Lineage: l(), Digest: s(), Cwd: s()}
		if rng.IntN(2) == 0 {
			r.Process.StartTime = time.Unix(rng.Int64N(253402300799), rng.Int64N(1e9)).In(zone)
		}
	}
	r.ProcessID, r.PID, r.Count = i64(), int(i64()), int(i64())
	if rng.IntN(2) == 0 {
		r.Until = time.Unix(rng.Int64N(253402300799), rng.Int64N(1e9)).In(zone)
	}
	for range rng.IntN(3) {
		r.Reads = append(r.Reads, DirReads{Dir: s(), Rule: s(), Count: int(i64()), Files: l()})
	}
	if rng.IntN(3) == 0 {
		c := &event.Changes{Credentials: l(), Headers: l()}
		if n := rng.IntN(4); n > 0 {
			c.Redacted = map[string]int{}
			for range n {
				c.Redacted[pool[rng.IntN(len(pool))]] = int(i64())
			}
		}
		r.Rewrite = c
	}
	for range rng.IntN(3) {
		r.ToolCalls = append(r.ToolCalls, event.ToolCall{ID: s(), Name: s()})
	}
	if rng.IntN(3) == 0 {
		code, ms := int(i64()), i64()
		r.ExitCode, r.DurationMS = &code, &ms
	}
	return r
}

func TestAppendRecordMatchesEncodingJSON(t *testing.T) {
	t.Run("samples", func(t *testing.T) {
		for _, e := range sampleEvents() {
			t.Run(string(e.Kind), func(t *testing.T) {
				r := RecordOf(e)
				checkEncoding(t, &r)
				tr := r.truncated()
				checkEncoding(t, &tr)
			})
		}
	})
	t.Run("empty", func(t *testing.T) { checkEncoding(t, &Record{}) })
	// randomRecord sets every member of Record: the encoder is held to
	// encoding/json for each (a member it forgets fails).
	t.Run("random records set every member", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		set := make([]bool, reflect.TypeFor[Record]().NumField())
		for range 200 {
			r := randomRecord(rng, trickyStrings)
			v := reflect.ValueOf(r)
			for i := range set {
				set[i] = set[i] || !v.Field(i).IsZero()
			}
		}
		for i, ok := range set {
			if !ok {
				t.Errorf("randomRecord never sets Record.%s", reflect.TypeFor[Record]().Field(i).Name)
			}
		}
	})
	t.Run("random", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for range 3000 {
			r := randomRecord(rng, trickyStrings)
			checkEncoding(t, &r)
		}
	})
	t.Run("time out of range", func(t *testing.T) {
		for _, tm := range []time.Time{
			time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(2025, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600)),
		} {
			if _, ok := appendRecord(nil, &Record{Time: tm}); ok {
				t.Errorf("appendRecord took %v, which encoding/json refuses", tm)
			}
		}
	})
}

// FuzzAppendRecord holds the audit log's encoder to encoding/json for
// records made from the fuzzer's seed and strings.
func FuzzAppendRecord(f *testing.F) {
	f.Add(uint64(1), "", "")
	f.Add(uint64(2), "\x00\"\\\u2028", "\xff")
	f.Add(uint64(3), "https://h/p?q=<x>&y", "é😀")
	f.Fuzz(func(t *testing.T, seed uint64, a, b string) {
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		r := randomRecord(rng, []string{a, b, a + b})
		checkEncoding(t, &r)
	})
}
