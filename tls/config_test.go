package tls

import (
	stdtls "crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// handshake runs a client handshake with cfg against a server using srvCfg
// over a real socket and returns the client's view.
func handshake(t *testing.T, srvCfg, cfg *stdtls.Config) stdtls.ConnectionState {
	t.Helper()
	ln, err := stdtls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			// The write carries TLS 1.3 session tickets along with it.
			if err = c.(*stdtls.Conn).Handshake(); err == nil {
				_, err = c.Write([]byte{1})
			}
			c.Close()
		}
		srvErr <- err
	}()
	c, err := stdtls.Dial("tcp", ln.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	st := c.ConnectionState()
	c.Close()
	if err := <-srvErr; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	return st
}

func TestServerConfigALPN(t *testing.T) {
	cert, pool := testCert(t, "api.example.test")
	srvCfg := ServerConfig(staticCerts{cert: &cert})
	tests := []struct {
		name   string
		offers []string
		want   string
	}{
		{"h2 first", []string{"h2", "http/1.1"}, "h2"},
		{"http/1.1 only", []string{"http/1.1"}, "http/1.1"},
		{"client prefers http/1.1", []string{"http/1.1", "h2"}, "http/1.1"},
		{"h2 only", []string{"h2"}, "h2"},
		{"unknown protocol gets none, not a failed handshake", []string{"x-custom"}, ""},
		{"unknown then h2", []string{"x-custom", "h2"}, "h2"},
		{"no alpn", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := stdtls.NewLRUClientSessionCache(4)
			cfg := &stdtls.Config{ServerName: "api.example.test", RootCAs: pool, NextProtos: tt.offers, ClientSessionCache: cache}
			st := handshake(t, srvCfg, cfg)
			if st.NegotiatedProtocol != tt.want {
				t.Errorf("negotiated %q, want %q", st.NegotiatedProtocol, tt.want)
			}
			if st.Version < stdtls.VersionTLS12 {
				t.Errorf("version %x", st.Version)
			}
			// Session tickets are on, whichever per-client config served.
			if st := handshake(t, srvCfg, cfg); !st.DidResume {
				t.Error("second connection did not resume")
			}
		})
	}
}

func TestServerConfigRefusesOldTLS(t *testing.T) {
	cert, pool := testCert(t, "api.example.test")
	srvCfg := ServerConfig(staticCerts{cert: &cert})
	ln, err := stdtls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.(*stdtls.Conn).Handshake()
			c.Close()
		}
	}()
	c, err := stdtls.Dial("tcp", ln.Addr().String(), &stdtls.Config{ServerName: "api.example.test", RootCAs: pool, MaxVersion: stdtls.VersionTLS11})
	if err == nil {
		c.Close()
		t.Fatal("TLS 1.1 handshake succeeded")
	}
}

func TestLoadRoots(t *testing.T) {
	cert, _ := testCert(t, "root.test")
	dir := t.TempDir()
	good := filepath.Join(dir, "good.pem")
	os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644)
	empty := filepath.Join(dir, "empty.pem")
	os.WriteFile(empty, []byte("not a certificate\n"), 0o644)
	missing := filepath.Join(dir, "missing.pem")

	t.Run("file", func(t *testing.T) {
		pool, err := LoadRoots(false, good)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Leaf.Verify(x509VerifyOptions(pool)); err != nil {
			t.Errorf("loaded root does not verify its certificate: %v", err)
		}
	})
	t.Run("none", func(t *testing.T) {
		pool, err := LoadRoots(false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Leaf.Verify(x509VerifyOptions(pool)); err == nil {
			t.Error("empty pool verified a certificate")
		}
	})
	t.Run("system", func(t *testing.T) {
		if _, err := LoadRoots(true, good); err != nil {
			t.Fatal(err)
		}
	})
	for _, bad := range []string{empty, missing} {
		t.Run("bad "+filepath.Base(bad), func(t *testing.T) {
			_, err := LoadRoots(false, good, bad)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), bad) {
				t.Errorf("error %q does not name %s", err, bad)
			}
		})
	}
}

func TestServerConfigCertificateForName(t *testing.T) {
	cert, pool := testCert(t, "named.example.test")
	asked := make(chan string, 1)
	srvCfg := ServerConfig(staticCerts{cert: &cert, asked: asked})
	handshake(t, srvCfg, &stdtls.Config{ServerName: "named.example.test", RootCAs: pool})
	if got := <-asked; got != "named.example.test" {
		t.Errorf("GetCertificate asked for %q", got)
	}
}

var _ net.Conn = (*bufferedConn)(nil)

func x509VerifyOptions(pool *x509.CertPool) x509.VerifyOptions {
	return x509.VerifyOptions{Roots: pool, DNSName: "root.test"}
}
