// Package certs owns Chaperone's certificate authority, the leaf certificates
// that the TLS-intercepting proxy presents, and the trust environment that
// makes an agent's processes accept them.
//
// The CA (LoadOrCreate, Load) is an ECDSA P-256 key and a self-signed
// certificate kept in one directory: ca.pem (0644) and ca-key.pem (PKCS#8,
// 0600, written atomically). Loading refuses a key file that group or others
// may access, a key that does not match the certificate, a certificate that
// is not a CA and an expired CA. No method of CA prints its key.
//
// Leaves mints one leaf per host on demand and keeps it in an LRU cache; it is
// safe for concurrent use, and concurrent first requests for one host mint
// once. A nil error from Certificate means the returned leaf names the host
// and chains to the CA.
//
// WriteTrustBundle and TrustEnv build the bundle (system roots followed by the
// CA) and the variables (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, ...) that point a
// session's processes at it.
//
// Install puts the CA in the system trust store of Debian/Ubuntu,
// Fedora/RHEL or Arch (recognised by the update command in PATH and the
// anchor directory), and writes BundlePath and the drop-ins that set the
// trust variables for new login shells and systemd user sessions;
// Uninstall removes exactly what Install wrote (files are recognised by
// their content or a marker line, never by name alone). Both run the
// store's update command through a Runner, and work under any root
// directory (InstallOptions.Root), which is how they are tested.
//
// This package imports only the standard library, golang-lru/v2 and
// x/sync/singleflight; it must not import any other Chaperone package.
package certs
