package certs

import (
	"strconv"
	"testing"
)

// BenchmarkLeafCold and BenchmarkLeafWarm run side by side with
// `go test -bench Leaf ./certs`: the cost of minting (one ECDSA signature and
// a parse) against a cache hit.

func BenchmarkLeafCold(b *testing.B) {
	l := NewLeaves(newTestCA(b, t0), LeafOptions{Now: fixedClock(t0)})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := l.Certificate("h" + strconv.Itoa(i) + ".example.test"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLeafWarm(b *testing.B) {
	l := NewLeaves(newTestCA(b, t0), LeafOptions{Now: fixedClock(t0)})
	if _, err := l.Certificate("warm.example.test"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Certificate("warm.example.test"); err != nil {
			b.Fatal(err)
		}
	}
}
