package gomitm

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// startProxy serves New with a fresh CA that trusts upstream's roots, and
// returns the proxy's URL and the CA for clients.
func startProxy(t *testing.T, roots *x509.CertPool) (*url.URL, *x509.CertPool) {
	t.Helper()
	ca, caPEM, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: New(ca, roots)}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("NewCA: no PEM certificate")
	}
	return &url.URL{Scheme: "http", Host: l.Addr().String()}, pool
}

func upstream(t *testing.T) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from "+r.Host+" over "+r.Proto)
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	return up, roots
}

func client(proxy *url.URL, ca *x509.CertPool, h2, keepAlive bool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:             http.ProxyURL(proxy),
		TLSClientConfig:   &tls.Config{RootCAs: ca},
		ForceAttemptHTTP2: h2,
		DisableKeepAlives: !keepAlive,
	}}
}

// TestIntercepts: HTTP/1.1 and HTTP/2 clients that trust only the proxy's
// CA get the upstream's answer through it, over the protocol they asked
// for, with an ECDSA leaf for the upstream's address.
func TestIntercepts(t *testing.T) {
	up, roots := upstream(t)
	proxy, ca := startProxy(t, roots)
	for _, tc := range []struct {
		name  string
		h2    bool
		proto string
	}{{"h1", false, "HTTP/1.1"}, {"h2", true, "HTTP/2.0"}} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := client(proxy, ca, tc.h2, true).Get(up.URL + "/x")
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			host := strings.TrimPrefix(up.URL, "https://")
			if res.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "hello from "+host) {
				t.Fatalf("got %d %q", res.StatusCode, body)
			}
			if res.Proto != tc.proto {
				t.Errorf("client spoke %s, want %s", res.Proto, tc.proto)
			}
			leaf := res.TLS.PeerCertificates[0]
			if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok {
				t.Errorf("leaf key is %T, want ECDSA", leaf.PublicKey)
			}
			if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
				t.Errorf("leaf: %v", err)
			}
		})
	}
}

// TestLeafCache: each new connection to a host gets the same leaf, signed
// once; a proxy that signed one per connection would measure signing.
func TestLeafCache(t *testing.T) {
	up, roots := upstream(t)
	proxy, ca := startProxy(t, roots)
	c := client(proxy, ca, false, false)
	var serials []string
	for range 3 {
		res, err := c.Get(up.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		serials = append(serials, res.TLS.PeerCertificates[0].SerialNumber.String())
	}
	if serials[0] != serials[1] || serials[1] != serials[2] {
		t.Errorf("leaf serials %v: want one leaf for every connection", serials)
	}
}

// TestVerifiesUpstream: an upstream whose certificate the proxy does not
// trust gets no request through.
func TestVerifiesUpstream(t *testing.T) {
	var reached atomic.Bool
	up := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Store(true) }))
	defer up.Close()
	proxy, ca := startProxy(t, x509.NewCertPool())
	res, err := client(proxy, ca, false, true).Get(up.URL)
	if err == nil {
		res.Body.Close()
		if res.StatusCode < 500 {
			t.Errorf("status %d through an untrusted upstream, want an error", res.StatusCode)
		}
	}
	if reached.Load() {
		t.Error("the request reached an upstream the proxy does not trust")
	}
}
