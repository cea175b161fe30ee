package gomitm

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/chaperone-dev/chaperone/bench/benchca"
	"github.com/elazarl/goproxy"
)

// NewCA returns a new CA certificate and key for signing leaves, and the
// certificate in PEM for clients to trust.
func NewCA() (tls.Certificate, []byte, error) { return benchca.New(CAName) }

// CAName is the name of the CA NewCA makes.
const CAName = "gomitm benchmark CA"

// New returns the proxy: it intercepts every CONNECT with leaves signed by
// ca and trusts roots upstream.
func New(ca tls.Certificate, roots *x509.CertPool) *goproxy.ProxyHttpServer {
	p := goproxy.NewProxyHttpServer()
	p.AllowHTTP2 = true
	p.CertStore = &certStore{}
	p.Tr = &http.Transport{
		Proxy:               nil, // straight to the origin, whatever the environment says
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: roots},
		MaxIdleConns:        0,    // no limit
		MaxIdleConnsPerHost: 1024, // the default of 2 would close most of c=64's upstream connections
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	action := &goproxy.ConnectAction{Action: goproxy.ConnectMitm, TLSConfig: goproxy.TLSConfigFromCA(&ca)}
	p.OnRequest().HandleConnect(goproxy.FuncHttpsHandler(func(host string, _ *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		return action, host
	}))
	return p
}

// certStore keeps one leaf per host, as goproxy recommends: without it,
// each connection would sign a new one.
type certStore struct {
	mu    sync.Mutex
	certs map[string]*tls.Certificate
}

func (s *certStore) Fetch(host string, gen func() (*tls.Certificate, error)) (*tls.Certificate, error) {
	s.mu.Lock()
	c, ok := s.certs[host]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	c, err := gen()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.certs[host]; ok {
		return prev, nil
	}
	if s.certs == nil {
		s.certs = map[string]*tls.Certificate{}
	}
	s.certs[host] = c
	return c, nil
}
