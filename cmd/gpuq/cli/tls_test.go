package cli

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/viper"
)

// tlsFiles is a CA and the server and client certificates it signed, as PEM
// files.
type tlsFiles struct {
	ca, serverCert, serverKey, clientCert, clientKey string
	pool                                             *x509.CertPool
}

func newTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpuq test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	f := tlsFiles{ca: write("ca.pem", "CERTIFICATE", caDER), pool: x509.NewCertPool()}
	f.pool.AddCert(caCert)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (string, string) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	f.serverCert, f.serverKey = leaf(2, "server", x509.ExtKeyUsageServerAuth)
	f.clientCert, f.clientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth)
	return f
}

// A deployment's NATS with TLS, client certificates required and a user's
// password is reached with --nats-ca, --nats-cert and --nats-key and the
// password in the URL; without the CA or the client certificate it is not,
// and no error shows the password.
func TestNATSOverTLSWithAClientCertificateAndAPasswordInTheURL(t *testing.T) {
	f := newTLSFiles(t)
	cert, err := tls.LoadX509KeyPair(f.serverCert, f.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		Username: "alice", Password: "s3cret-tls",
		TLS: true, TLSVerify: true, TLSTimeout: 2,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: f.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS did not start")
	}
	url := fmt.Sprintf("tls://alice:s3cret-tls@127.0.0.1:%d", ns.Addr().(*net.TCPAddr).Port)
	dialWith := func(settings map[string]string) error {
		v := viper.New()
		v.Set("nats-url", url)
		for k, val := range settings {
			v.Set(k, val)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := dial(ctx, v, false)
		if err == nil {
			defer c.Close()
			if !c.nc.IsConnected() {
				return fmt.Errorf("not connected")
			}
			if _, err := c.nc.TLSConnectionState(); err != nil {
				return fmt.Errorf("connected without TLS: %w", err)
			}
		}
		return err
	}
	all := map[string]string{"nats-ca": f.ca, "nats-cert": f.clientCert, "nats-key": f.clientKey}
	if err := dialWith(all); err != nil {
		t.Fatalf("with the CA, a client certificate and the password: %v", err)
	}
	for name, settings := range map[string]map[string]string{
		"without the CA":                 {"nats-cert": f.clientCert, "nats-key": f.clientKey},
		"without a client certificate":   {"nats-ca": f.ca},
		"with a key but no certificate":  {"nats-ca": f.ca, "nats-key": f.clientKey},
		"with a certificate file absent": {"nats-ca": f.ca, "nats-cert": filepath.Join(t.TempDir(), "none.pem"), "nats-key": f.clientKey},
	} {
		err := dialWith(settings)
		if err == nil {
			t.Errorf("%s: connected", name)
			continue
		}
		if strings.Contains(err.Error(), "s3cret-tls") {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}
