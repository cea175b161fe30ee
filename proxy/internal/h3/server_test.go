package h3

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/quic-go/quic-go"
)

// testCert is a self-signed certificate for a.test and b.test, and a
// pool that trusts it.
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "h3 test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"a.test", "b.test"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, roots
}

type dcidKey struct{}

// Two connections dialled at once from one client socket: Start gets
// each one's first Initial's destination connection ID, and the context
// Start returned is the one each connection's ClientHello carries. A
// connection Start refuses fails its handshake.
func TestServerStartByDCID(t *testing.T) {
	cert, roots := testCert(t)
	var mu sync.Mutex
	var started, hellos []string
	srv := &Server{
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			mu.Lock()
			defer mu.Unlock()
			dcid, _ := hello.Context().Value(dcidKey{}).(string)
			hellos = append(hellos, hello.ServerName+" "+dcid)
			return nil, nil
		}},
		Start: func(ctx context.Context, client netip.AddrPort, dcid []byte) (context.Context, error) {
			mu.Lock()
			defer mu.Unlock()
			started = append(started, string(dcid))
			if len(started) > 2 {
				return nil, errors.New("refused")
			}
			return context.WithValue(ctx, dcidKey{}, string(dcid)), nil
		},
		HandshakeTimeout: 5 * time.Second,
	}
	pc, err := net.ListenPacket("udp", "127.0.46.10:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(pc) }()
	defer func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	cpc, err := net.ListenPacket("udp", "127.0.46.11:0")
	if err != nil {
		t.Fatal(err)
	}
	defer cpc.Close()
	tr := &quic.Transport{Conn: cpc}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(name string) error {
		conf := &tls.Config{ServerName: name, RootCAs: roots, NextProtos: []string{NextProto}}
		c, err := tr.Dial(ctx, pc.LocalAddr(), conf, &quic.Config{})
		if err != nil {
			return err
		}
		return c.CloseWithError(0, "")
	}
	errs := make(chan error, 2)
	for _, name := range []string{"a.test", "b.test"} {
		go func() { errs <- dial(name) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("dial: %v", err)
		}
	}
	if err := dial("c.test"); err == nil {
		t.Error("a connection Start refused was dialled")
	}

	mu.Lock()
	defer mu.Unlock()
	if len(started) != 3 || started[0] == started[1] || started[0] == "" || started[1] == "" {
		t.Fatalf("Start got DCIDs %q, want three, the first two distinct", started)
	}
	// Each ClientHello carries its own connection's Start context.
	var got []string
	for _, h := range hellos {
		_, dcid, _ := strings.Cut(h, " ")
		got = append(got, dcid)
	}
	slices.Sort(got)
	want := []string{started[0], started[1]}
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ClientHellos' Start contexts (-want +got):\n%s\nhellos %q", diff, hellos)
	}
}
