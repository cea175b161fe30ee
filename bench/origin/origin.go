package origin

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// Sizes of the bodies served at the paths of the same names.
const (
	Path1K    = "/1k"
	Size1K    = 1 << 10
	Path100MB = "/100m"
	Size100MB = 100 << 20
)

// Server is a running origin.
type Server struct {
	Addr   netip.AddrPort // where it listens
	CAFile string         // the CA certificate (PEM) its leaf chains to
	Roots  *x509.CertPool // the same CA, for Go clients

	// H3Addr is where it serves HTTP/3 over QUIC, once ServeHTTP3 has
	// started that.
	H3Addr netip.AddrPort

	srv       *http.Server
	leaf      tls.Certificate
	done      chan struct{}
	closeOnce sync.Once

	h3     *http3.Server
	h3Done chan struct{}
}

// Start listens on addr (a loopback IP:port; port 0 picks one) and writes
// the CA certificate into dir.
func Start(addr, dir string, now func() time.Time) (*Server, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("origin: %q is not a loopback IP:port", addr)
	}
	caCert, leaf, err := mint(ap.Addr(), now())
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "origin-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}), 0o644); err != nil {
		return nil, fmt.Errorf("origin: write ca: %w", err)
	}
	ln, err := net.Listen("tcp", ap.String())
	if err != nil {
		return nil, fmt.Errorf("origin: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	s := &Server{
		Addr:   ln.Addr().(*net.TCPAddr).AddrPort(),
		CAFile: caFile,
		Roots:  pool,
		leaf:   leaf,
		done:   make(chan struct{}),
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	s.srv = &http.Server{
		Handler:           Handler(),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{leaf}},
		Protocols:         &protos,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       10 * time.Minute, // held idle connections stay
		// Clients that go away mid-handshake are expected (the proxies
		// under test drop them); not worth a line each.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() {
		defer close(s.done)
		s.srv.ServeTLS(ln, "", "")
	}()
	return s, nil
}

// URL returns https://addr + path.
func (s *Server) URL(path string) string { return "https://" + s.Addr.String() + path }

// H3URL returns https://H3Addr + path.
func (s *Server) H3URL(path string) string { return "https://" + s.H3Addr.String() + path }

// ServeHTTP3 serves the same paths over HTTP/3 on UDP port (0 picks one)
// of the server's address, with the same certificate. Port 443 is the one
// a transparent session redirects to its proxy. It is started once, before
// Close.
func (s *Server) ServeHTTP3(port uint16) error {
	pc, err := net.ListenPacket("udp", netip.AddrPortFrom(s.Addr.Addr(), port).String())
	if err != nil {
		return fmt.Errorf("origin: http3: %w", err)
	}
	s.H3Addr = pc.LocalAddr().(*net.UDPAddr).AddrPort()
	s.h3 = &http3.Server{
		Handler:   Handler(),
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{s.leaf}}),
	}
	s.h3Done = make(chan struct{})
	go func() {
		defer close(s.h3Done)
		s.h3.Serve(pc)
		pc.Close()
	}()
	return nil
}

// Close stops the server and closes every connection.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.srv.Close()
		<-s.done
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if s.h3 != nil {
			s.h3.Close()
			<-s.h3Done
		}
	})
	return err
}

// Handler serves Path1K and Path100MB, and /bytes/N for N bytes.
func Handler() http.Handler {
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = 'a' + byte(i%26)
	}
	serve := func(w http.ResponseWriter, n int64) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			m := min(n, int64(len(chunk)))
			if _, err := w.Write(chunk[:m]); err != nil {
				return
			}
			n -= m
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path1K, func(w http.ResponseWriter, _ *http.Request) { serve(w, Size1K) })
	mux.HandleFunc("GET "+Path100MB, func(w http.ResponseWriter, _ *http.Request) { serve(w, Size100MB) })
	mux.HandleFunc("GET /bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
		if err != nil || n < 0 || n > 1<<30 {
			http.Error(w, "bad size", http.StatusBadRequest)
			return
		}
		serve(w, n)
	})
	return mux
}

// mint makes a CA and a leaf for ip signed by it, both ECDSA P-256.
func mint(ip netip.Addr, now time.Time) (*x509.Certificate, tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("origin: ca key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Chaperone bench origin CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("origin: sign ca: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("origin: parse ca: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("origin: leaf key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: ip.String()},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(30 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{ip.AsSlice()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("origin: sign leaf: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("origin: parse leaf: %w", err)
	}
	return caCert, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}
