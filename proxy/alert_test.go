package proxy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// tlsRecord is one TLS record: type, version 3.minor, body.
func tlsRecord(typ, minor byte, body ...byte) []byte {
	return append([]byte{typ, 3, minor, byte(len(body) >> 8), byte(len(body))}, body...)
}

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// The client's flights a rejecting client sends, by hand.
var (
	helloRecord = tlsRecord(22, 1, make([]byte, 300)...)           // a ClientHello's record
	ccsRecord   = tlsRecord(20, 3, 1)                              // TLS 1.3's compatibility ChangeCipherSpec
	unknownCA   = tlsRecord(21, 3, 2, 48)                          // a fatal unknown_ca in the clear
	encrypted   = tlsRecord(23, 3, make([]byte, 19)...)            // an encrypted alert in TLS 1.3
	encAlert12  = tlsRecord(21, 3, make([]byte, 26)...)            // an encrypted alert in TLS 1.2
	emptyRecord = tlsRecord(22, 3)                                 // a record with no body
	notTLS      = []byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n") // not records at all
)

type sniffed struct {
	Found       bool
	Level, Desc uint8
	Data        int
}

func TestAlertSniffer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream []byte
		want   sniffed
	}{
		{"TLS 1.3 alert in the clear after ChangeCipherSpec", cat(helloRecord, ccsRecord, unknownCA), sniffed{true, 2, 48, 0}},
		{"TLS 1.2 alert", cat(helloRecord, tlsRecord(21, 3, 2, 42)), sniffed{true, 2, 42, 0}},
		{"after an empty record", cat(helloRecord, emptyRecord, unknownCA), sniffed{true, 2, 48, 0}},
		{"the first alert only", cat(helloRecord, tlsRecord(21, 3, 1, 0), unknownCA), sniffed{true, 1, 0, 0}},
		{"encrypted, TLS 1.3", cat(helloRecord, ccsRecord, encrypted), sniffed{Data: 1}},
		{"Finished and a request, TLS 1.3", cat(helloRecord, ccsRecord, encrypted, encrypted[:7]), sniffed{Data: 2}},
		{"data after the alert", cat(unknownCA, encrypted), sniffed{true, 2, 48, 0}},
		{"encrypted, TLS 1.2", cat(helloRecord, encAlert12), sniffed{}},
		{"alert cut short", cat(helloRecord, unknownCA[:6]), sniffed{}},
		{"not TLS", cat(notTLS, unknownCA), sniffed{}},
		{"bad type", cat(tlsRecord(19, 3, 0), unknownCA), sniffed{}},
		{"bad version", cat([]byte{22, 2, 0, 0, 0}, unknownCA), sniffed{}},
		{"too long a record", cat([]byte{23, 3, 3, 0xff, 0xff}, unknownCA), sniffed{}},
		{"data cut short", encrypted[:9], sniffed{Data: 1}},
		{"nothing", nil, sniffed{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Whole, and a byte at a time.
			for _, step := range []int{len(tc.stream) + 1, 1} {
				var s alertSniffer
				for b := tc.stream; len(b) > 0; {
					n := min(step, len(b))
					s.feed(b[:n])
					b = b[n:]
				}
				if diff := cmp.Diff(tc.want, sniffed{s.found, s.level, s.desc, s.data}); diff != "" {
					t.Errorf("fed %d bytes at a time (-want +got):\n%s", step, diff)
				}
			}
		})
	}
}

// FuzzAlertSniffer holds the sniffer, fed in pieces, to firstClearAlert's
// reading of the whole stream. The seeds are hand-made records; cuts says
// where the stream is cut into pieces.
func FuzzAlertSniffer(f *testing.F) {
	for _, s := range [][]byte{
		cat(helloRecord, ccsRecord, unknownCA),
		cat(helloRecord, tlsRecord(21, 3, 2, 42)),
		cat(helloRecord, ccsRecord, encrypted, unknownCA),
		cat(helloRecord, encAlert12),
		cat(emptyRecord, unknownCA),
		unknownCA[:6],
		notTLS,
	} {
		f.Add(s, []byte{1, 5, 7, 200})
	}
	f.Fuzz(func(t *testing.T, stream, cuts []byte) {
		var s alertSniffer
		b := stream
		for i := 0; len(b) > 0; i++ {
			n := len(b)
			if i < len(cuts) {
				n = min(int(cuts[i]), n)
			}
			s.feed(b[:n])
			b = b[n:]
		}
		level, desc, ok, data := firstClearAlert(stream)
		if got, want := (sniffed{s.found, s.level, s.desc, s.data}), (sniffed{ok, level, desc, data}); got != want {
			t.Fatalf("sniffer %+v, whole stream %+v", got, want)
		}
	})
}

func TestCARejectionsSilentCloses(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at     time.Duration
		served bool // a client spoke instead of closing
		want   bool // silentClose's answer
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  bool // rejects at the end
	}{
		{"one close", []step{{0, false, false}}, false},
		{"two in a minute", []step{{0, false, false}, {time.Minute, false, true}}, true},
		{"two too far apart", []step{{0, false, false}, {time.Minute + time.Second, false, false}}, false},
		{"then a third", []step{{0, false, false}, {2 * time.Minute, false, false}, {2*time.Minute + time.Second, false, true}}, true},
		{"not in a row", []step{{0, false, false}, {time.Second, true, false}, {2 * time.Second, false, false}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCARejections()
			for i, s := range tc.steps {
				if s.served {
					r.served("s", "h")
					continue
				}
				if got := r.silentClose("s", "h", t0.Add(s.at)); got != s.want {
					t.Errorf("close %d: silentClose = %v, want %v", i, got, s.want)
				}
			}
			if got := r.rejects("s", "h"); got != tc.want {
				t.Errorf("rejects = %v, want %v", got, tc.want)
			}
			if r.rejects("other", "h") || r.rejects("s", "other") {
				t.Error("another session or host is remembered too")
			}
			r.forget("s")
			if r.rejects("s", "h") {
				t.Error("rejects after forget")
			}
		})
	}
}

func TestCARejectionsBounded(t *testing.T) {
	r := newCARejections()
	for i := range rejectMemory + 1 {
		r.reject("s", string(rune('a'+i%26))+string(rune(i)))
	}
	if got := r.lru.Len(); got != rejectMemory {
		t.Errorf("%d remembered, want %d", got, rejectMemory)
	}
}
