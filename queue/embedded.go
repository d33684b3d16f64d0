package queue

import (
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedNATS is an in-process NATS server with JetStream, used by
// `gpuq dev`, the demo and the tests. It always runs with gpuq's roles
// (permissions.go): a client connects with a credential from Issuer, and
// may do only what its role allows.
type EmbeddedNATS struct {
	Server *server.Server
	// Issuer issues the credentials the server admits.
	Issuer  *CredentialIssuer
	control NATSCredential
}

// StartEmbeddedNATS starts a JetStream-enabled server storing under dir. Port
// 0 picks a free port.
func StartEmbeddedNATS(dir string, port int) (*EmbeddedNATS, error) {
	issuer, err := NewCredentialIssuer()
	if err != nil {
		return nil, err
	}
	return StartEmbeddedNATSWith(dir, port, issuer)
}

// StartEmbeddedNATSWith is StartEmbeddedNATS admitting the credentials of
// issuer: started again on the same dir and port with an issuer of the same
// key, the server is the same to its clients.
func StartEmbeddedNATSWith(dir string, port int, issuer *CredentialIssuer) (*EmbeddedNATS, error) {
	if port == 0 {
		port = server.RANDOM_PORT
	}
	control, err := issuer.Issue(RoleControl)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
		// Checkpoint chunks and log batches fit well inside this.
		MaxPayload: 8 << 20,

		CustomClientAuthentication: issuer,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("starting embedded NATS: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded NATS did not become ready")
	}
	return &EmbeddedNATS{Server: s, Issuer: issuer, control: control}, nil
}

// URL is the client URL of the server, without a credential.
func (e *EmbeddedNATS) URL() string { return e.Server.ClientURL() }

// Control is the control plane's credential.
func (e *EmbeddedNATS) Control() NATSCredential { return e.control }

// ControlURL is the client URL carrying the control plane's credential.
func (e *EmbeddedNATS) ControlURL() string { return e.URLFor(e.control) }

// URLFor is the client URL carrying cred.
func (e *EmbeddedNATS) URLFor(cred NATSCredential) string {
	return URLWithCredential(e.URL(), cred)
}

// URLWithCredential is the client URL serverURL carrying cred, for a
// process that takes both in one URL; serverURL as it is when it does not
// parse.
func URLWithCredential(serverURL string, cred NATSCredential) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		return serverURL
	}
	u.User = url.UserPassword(cred.User, cred.Password)
	return u.String()
}

// Stop shuts the server down and waits for it.
func (e *EmbeddedNATS) Stop() {
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
}
