package dns

import (
	"fmt"
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
			puts: func(m *nameMemory) { m.put(a1, "a.test", 0, testNow, 0) },
			lookups: []lookup{
				{a1, minRemember - time.Second, "a.test", true},
				{a1, minRemember, "", false},
			},
		},
		{
			name: "long TTL kept for the TTL",
			puts: func(m *nameMemory) { m.put(a1, "a.test", 0, testNow, 3600) },
			lookups: []lookup{
				{a1, time.Hour - time.Second, "a.test", true},
				{a1, time.Hour, "", false},
			},
		},
		{
			name:    "huge TTL capped",
			puts:    func(m *nameMemory) { m.put(a1, "a.test", 0, testNow, 1<<31) },
			lookups: []lookup{{a1, maxRemember, "", false}},
		},
		{
			name: "latest name wins and renews",
			puts: func(m *nameMemory) {
				m.put(a1, "old.test", 0, testNow, 0)
				m.put(a1, "new.test", 0, testNow.Add(5*time.Minute), 0)
			},
			lookups: []lookup{{a1, minRemember + time.Minute, "new.test", true}},
		},
		{
			name: "least recently used is evicted",
			puts: func(m *nameMemory) {
				m.put(a1, "one.test", 0, testNow, 60)
				m.put(a2, "two.test", 0, testNow, 60)
				m.put(a1, "one.test", 0, testNow, 60) // a1 is now the most recent
				m.put(a3, "three.test", 0, testNow, 60)
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
				name, ok := m.get(l.addr, 0, testNow.Add(l.at))
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

// An address answers for several names, looked up by several processes:
// each process's own lookup is its name, and any of them was resolved to
// it; the last lookup of the address by anyone is another thing.
func TestNameMemoryNames(t *testing.T) {
	cdn := netip.MustParseAddr("192.0.2.10")
	m := newNameMemory(8)
	m.put(cdn, "api.test", 100, testNow, 60)                // the agent
	m.put(cdn, "denied.test", 200, testNow, 60)             // curl, later
	m.put(cdn, "old.test", 300, testNow.Add(-time.Hour), 0) // expired by now
	tests := []struct {
		name string
		pid  int
		want string
	}{
		{"the agent's own lookup", 100, "api.test"},
		{"curl's own lookup", 200, "denied.test"},
		{"a process that looked nothing up", 400, ""},
		{"anyone: the last lookup", 0, "denied.test"},
		{"an expired lookup", 300, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := m.get(cdn, tt.pid, testNow); ok != (tt.want != "") || got != tt.want {
				t.Errorf("get(pid %d) = %q, %v; want %q", tt.pid, got, ok, tt.want)
			}
		})
	}
	for name, want := range map[string]bool{"api.test": true, "denied.test": true, "old.test": false, "other.test": false} {
		if got := m.has(cdn, name, testNow); got != want {
			t.Errorf("has(%s) = %v, want %v", name, got, want)
		}
	}
	// The agent looks its name up again: its lookup is the latest now.
	m.put(cdn, "api.test", 100, testNow, 60)
	if got, _ := m.get(cdn, 0, testNow); got != "api.test" {
		t.Errorf("after the agent's second lookup, get = %q, want api.test", got)
	}
	if got, _ := m.get(cdn, 200, testNow); got != "denied.test" {
		t.Errorf("curl's name = %q, want denied.test", got)
	}
}

// The names of one address and the processes of one name are bounded:
// the least recently looked up go first.
func TestNameMemoryBounds(t *testing.T) {
	cdn := netip.MustParseAddr("192.0.2.11")
	m := newNameMemory(8)
	for i := range maxNamesPerAddr + 4 {
		m.put(cdn, fmt.Sprintf("n%d.test", i), 1000+i, testNow, 60)
	}
	for i := range maxNamesPerAddr + 4 {
		want := i >= 4
		if got := m.has(cdn, fmt.Sprintf("n%d.test", i), testNow); got != want {
			t.Errorf("has(n%d.test) = %v, want %v", i, got, want)
		}
	}
	for pid := range maxPIDsPerName + 2 {
		m.put(cdn, "busy.test", pid+1, testNow, 60)
	}
	e := m.byIP[cdn].Value.(*nameEntry)
	if len(e.names) != maxNamesPerAddr || e.names[0].name != "busy.test" || len(e.names[0].pids) != maxPIDsPerName || e.names[0].pids[0] != maxPIDsPerName+2 {
		t.Errorf("entry = %+v", e.names[0])
	}
}
