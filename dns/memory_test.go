package dns

import (
	"net/netip"
	"testing"
	"time"
)

func TestNameMemory(t *testing.T) {
	a1, a2, a3 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8::3")
	type lookup struct {
		addr   netip.Addr
		at     time.Duration // after testNow
		want   string
		wantOK bool
	}
	tests := []struct {
		name    string
		puts    func(m *nameMemory)
		lookups []lookup
	}{
		{
			name: "short TTL kept for the minimum",
			puts: func(m *nameMemory) { m.put(a1, "a.test", testNow, 0) },
			lookups: []lookup{
				{a1, minRemember - time.Second, "a.test", true},
				{a1, minRemember, "", false},
			},
		},
		{
			name: "long TTL kept for the TTL",
			puts: func(m *nameMemory) { m.put(a1, "a.test", testNow, 3600) },
			lookups: []lookup{
				{a1, time.Hour - time.Second, "a.test", true},
				{a1, time.Hour, "", false},
			},
		},
		{
			name:    "huge TTL capped",
			puts:    func(m *nameMemory) { m.put(a1, "a.test", testNow, 1<<31) },
			lookups: []lookup{{a1, maxRemember, "", false}},
		},
		{
			name: "latest name wins and renews",
			puts: func(m *nameMemory) {
				m.put(a1, "old.test", testNow, 0)
				m.put(a1, "new.test", testNow.Add(5*time.Minute), 0)
			},
			lookups: []lookup{{a1, minRemember + time.Minute, "new.test", true}},
		},
		{
			name: "least recently used is evicted",
			puts: func(m *nameMemory) {
				m.put(a1, "one.test", testNow, 60)
				m.put(a2, "two.test", testNow, 60)
				m.put(a1, "one.test", testNow, 60) // a1 is now the most recent
				m.put(a3, "three.test", testNow, 60)
			},
			lookups: []lookup{
				{a1, 0, "one.test", true},
				{a2, 0, "", false},
				{a3, 0, "three.test", true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newNameMemory(2)
			tt.puts(m)
			for _, l := range tt.lookups {
				name, ok := m.get(l.addr, testNow.Add(l.at))
				if name != l.want || ok != l.wantOK {
					t.Errorf("get(%s, +%v) = %q, %v; want %q, %v", l.addr, l.at, name, ok, l.want, l.wantOK)
				}
			}
			if m.ll.Len() != len(m.byIP) || m.ll.Len() > 2 {
				t.Errorf("list has %d entries, map %d, capacity 2", m.ll.Len(), len(m.byIP))
			}
		})
	}
}
