//go:build !race

// Allocation counts are not those of a normal build under the race
// detector: its sync.Pool drops items at random.

package proxy

import (
	"math"
	"net/http"
	"testing"
)

// TestKeepAliveAllocs: a kept-alive HTTP/1.1 request through the proxy
// (decided, its event published, sent upstream on a pooled connection)
// costs at most keepAliveAllocs allocations more than the same request
// made directly. Client and upstream share the process and do the same
// work both ways, so the difference is the proxy's.
func TestKeepAliveAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a proxy and an upstream")
	}
	const keepAliveAllocs = 20 // 18 on Go 1.26
	be := newBenchEnv(t, true)
	per := func(c *http.Client) float64 {
		return testing.AllocsPerRun(200, func() { be.get(t, c, "h1") })
	}
	// The lowest of three tries each: a garbage collection that empties
	// the buffer pools meanwhile costs a few allocations.
	direct, proxied := math.Inf(1), math.Inf(1)
	for range 3 {
		direct, proxied = min(direct, per(be.direct["h1"])), min(proxied, per(be.viaPxy["h1"]))
	}
	if extra := proxied - direct; extra > keepAliveAllocs {
		t.Errorf("the proxy costs %.1f allocations a request (%.1f proxied, %.1f direct), want at most %d",
			extra, proxied, direct, keepAliveAllocs)
	} else {
		t.Logf("the proxy costs %.1f allocations a request (%.1f proxied, %.1f direct)", extra, proxied, direct)
	}
}
