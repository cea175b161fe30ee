package loadgen

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// Proto is the HTTP version spoken to the origin (through the tunnel when
// there is a proxy).
type Proto string

const (
	HTTP1 Proto = "h1"
	HTTP2 Proto = "h2"
	// HTTP3 is HTTP/3 over QUIC (UDP), direct only: no proxy variable
	// carries it. In a transparent session the kernel sends it to the
	// proxy's QUIC listener.
	HTTP3 Proto = "h3"
)

// Client says how to reach the origin.
type Client struct {
	// Proxy is an explicit proxy (http://[user:pass@]IP:port); nil = direct.
	Proxy *url.URL
	// Roots verify the origin's (or the intercepting proxy's) certificates;
	// nil = the system pool, which honours SSL_CERT_FILE.
	Roots *x509.CertPool
	Proto Proto
	// KeepAlive reuses connections; false opens a new one (a new CONNECT
	// and a new TLS handshake) for every request.
	KeepAlive bool
	// Conns is the most connections kept open (h1: one per worker).
	Conns int
}

// ProxyFromEnv returns HTTPS_PROXY (or https_proxy) as a URL, nil when
// neither is set. Unlike net/http's lookup it keeps loopback proxies.
func ProxyFromEnv(getenv func(string) string) (*url.URL, error) {
	for _, k := range []string{"HTTPS_PROXY", "https_proxy"} {
		if v := getenv(k); v != "" {
			return ParseProxy(v)
		}
	}
	return nil, nil
}

// ParseProxy parses an http:// proxy URL whose host is an IP literal.
func ParseProxy(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		// url's error quotes the whole URL, userinfo included.
		return nil, errors.New("loadgen: proxy url does not parse")
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("loadgen: proxy scheme %q, want http", u.Scheme)
	}
	host, _, err := net.SplitHostPort(u.Host)
	if err != nil || net.ParseIP(host) == nil {
		return nil, fmt.Errorf("loadgen: proxy host %q is not IP:port", u.Host)
	}
	return u, nil
}

// LoadRoots reads a PEM file of CA certificates.
func LoadRoots(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loadgen: roots: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("loadgen: roots: no certificate in %s", path)
	}
	return p, nil
}

func (c Client) tlsConfig(serverName string) *tls.Config {
	cfg := &tls.Config{RootCAs: c.Roots, ServerName: serverName}
	if c.Proto == HTTP2 {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	} else {
		cfg.NextProtos = []string{"http/1.1"}
	}
	return cfg
}

// roundTripper is what the load runs over: net/http's transport, or
// quic-go's for HTTP/3.
type roundTripper interface {
	http.RoundTripper
	CloseIdleConnections()
}

// transport builds the load's transport: quic-go's HTTP/3 one for HTTP3,
// else net/http's, whose dialer never resolves a name (it refuses anything
// that is not an IP literal).
func (c Client) transport() roundTripper {
	if c.Proto == HTTP3 {
		cfg := c.tlsConfig("")
		cfg.NextProtos = []string{http3.NextProtoH3}
		return &http3.Transport{TLSClientConfig: cfg, DisableCompression: true}
	}
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: -1}
	t := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil || net.ParseIP(host) == nil {
				return nil, fmt.Errorf("loadgen: dial %q: not an IP literal", addr)
			}
			return d.DialContext(ctx, network, addr)
		},
		TLSClientConfig:     c.tlsConfig(""),
		TLSHandshakeTimeout: 10 * time.Second,
		DisableKeepAlives:   !c.KeepAlive,
		DisableCompression:  true,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: max(c.Conns, 1),
		IdleConnTimeout:     time.Minute,
		ReadBufferSize:      64 << 10,
	}
	if c.Proxy != nil {
		t.Proxy = http.ProxyURL(c.Proxy)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	if c.Proto == HTTP2 {
		p.SetHTTP2(true)
		t.ForceAttemptHTTP2 = true
	}
	t.Protocols = &p
	return t
}

// holdConn opens one keep-alive connection to target (through the proxy
// when there is one) by hand, does one GET on it, and returns it open.
func (c Client) holdConn(ctx context.Context, target *url.URL) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: -1}
	addr := target.Host
	if c.Proxy != nil {
		addr = c.Proxy.Host
	}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		raw.SetDeadline(dl)
	}
	fail := func(err error) (net.Conn, error) {
		raw.Close()
		return nil, err
	}
	if c.Proxy != nil {
		var b strings.Builder
		fmt.Fprintf(&b, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n", target.Host, target.Host)
		if u := c.Proxy.User; u != nil {
			pass, _ := u.Password()
			cred := base64.StdEncoding.EncodeToString([]byte(u.Username() + ":" + pass))
			b.WriteString("Proxy-Authorization: Basic " + cred + "\r\n")
		}
		b.WriteString("\r\n")
		if _, err := io.WriteString(raw, b.String()); err != nil {
			return fail(fmt.Errorf("loadgen: connect: %w", err))
		}
		// The proxy sends nothing after its answer until the client's
		// TLS hello, so a buffered reader loses nothing.
		resp, err := http.ReadResponse(bufio.NewReader(raw), &http.Request{Method: http.MethodConnect})
		if err != nil {
			return fail(fmt.Errorf("loadgen: connect: %w", err))
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fail(fmt.Errorf("loadgen: connect: %s", resp.Status))
		}
	}
	host, _, _ := net.SplitHostPort(target.Host)
	cfg := c.tlsConfig(host)
	cfg.NextProtos = []string{"http/1.1"}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fail(fmt.Errorf("loadgen: tls: %w", err))
	}
	req := "GET " + target.RequestURI() + " HTTP/1.1\r\nHost: " + target.Host + "\r\n\r\n"
	if _, err := io.WriteString(tc, req); err != nil {
		return fail(fmt.Errorf("loadgen: request: %w", err))
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return fail(fmt.Errorf("loadgen: response: %w", err))
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return fail(fmt.Errorf("loadgen: response body: %w", err))
	}
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("loadgen: response: %s", resp.Status))
	}
	if resp.Close {
		return fail(errors.New("loadgen: response: the server closes the connection"))
	}
	raw.SetDeadline(time.Time{})
	return tc, nil
}
