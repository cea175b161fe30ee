// Package loadgen drives HTTPS load at an origin, directly or through an
// explicit proxy (HTTP CONNECT), and measures it: requests per second,
// latency percentiles, errors, bytes, and the CPU time and memory of the
// proxy's processes read from /proc over the measured window.
//
// Guarantees:
//   - Names are never resolved: targets and proxies are IP literals, and a
//     proxy given by URL is dialled as written. Loopback proxies are used
//     (net/http's environment lookup would bypass them, so it is not used).
//   - Credentials in a proxy URL's userinfo are sent as Proxy-Authorization
//     and never appear in a Result or an error.
//   - Run and Hold stop by themselves: every phase is bounded in time.
//
// It imports only the standard library; no Chaperone package imports it.
package loadgen
