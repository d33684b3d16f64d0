package queue

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedNATS is an in-process NATS server with JetStream, used by
// `gpuq dev` and the tests.
type EmbeddedNATS struct {
	Server *server.Server
}

// StartEmbeddedNATS starts a JetStream-enabled server storing under dir. Port
// 0 picks a free port.
func StartEmbeddedNATS(dir string, port int) (*EmbeddedNATS, error) {
	if port == 0 {
		port = server.RANDOM_PORT
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
	return &EmbeddedNATS{Server: s}, nil
}

// URL is the client URL of the server.
func (e *EmbeddedNATS) URL() string { return e.Server.ClientURL() }

// Stop shuts the server down and waits for it.
func (e *EmbeddedNATS) Stop() {
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
}
