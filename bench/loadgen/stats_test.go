package loadgen

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPercentile(t *testing.T) {
	ten := make([]time.Duration, 10)
	for i := range ten {
		ten[i] = time.Duration(i+1) * time.Millisecond
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Microsecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample p50", []time.Duration{7}, 50, 7},
		{"one sample p99", []time.Duration{7}, 99, 7},
		{"ten p50 is the fifth", ten, 50, 5 * time.Millisecond},
		{"ten p99 is the last", ten, 99, 10 * time.Millisecond},
		{"ten p10 is the first", ten, 10, time.Millisecond},
		{"ten p11 is the second", ten, 11, 2 * time.Millisecond},
		{"hundred p50", hundred, 50, 50 * time.Microsecond},
		{"hundred p99", hundred, 99, 99 * time.Microsecond},
		{"hundred p99.5", hundred, 99.5, 100 * time.Microsecond},
		{"p100 is the max", hundred, 100, 100 * time.Microsecond},
		{"p0 is nothing", hundred, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(p%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name    string
		samples []time.Duration
		want    Latency
	}{
		{"none", nil, Latency{}},
		{
			"unsorted input",
			[]time.Duration{4 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond},
			Latency{P50Ms: 2, P99Ms: 4, MeanMs: 2.5, MaxMs: 4},
		},
		{
			"one slow outlier moves p99 and mean, not p50",
			append(repeat(time.Millisecond, 99), 101*time.Millisecond),
			Latency{P50Ms: 1, P99Ms: 1, MeanMs: 2, MaxMs: 101},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Summarize(tt.samples)); diff != "" {
				t.Errorf("Summarize (-want +got):\n%s", diff)
			}
		})
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}
