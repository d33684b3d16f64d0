package queuetest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
)

// natsProcessEnv, set in a test binary's environment, makes ServeNATSProcess
// serve NATS instead of running the tests: "dir port key" (key in hex).
const natsProcessEnv = "GPUQ_TEST_NATS_PROCESS"

// NATSProcess is a JetStream server with gpuq's roles in a process of its
// own (the test binary, started again), so that a test can SIGKILL it as a
// crash kills a NATS server, and start it again on the same port and store
// directory, admitting the same credentials. The test binary's TestMain
// must call ServeNATSProcess first.
type NATSProcess struct {
	// URL is the server's client URL, without a credential.
	URL string
	// Issuer issues the credentials the server admits.
	Issuer *queue.CredentialIssuer
	// Control is the control plane's credential.
	Control queue.NATSCredential

	dir, key string
	port     int
	cmd      *exec.Cmd
}

// ServeNATSProcess returns at once unless this process was started by
// StartNATSProcess; then it serves NATS until it is killed or the test
// binary that started it ends.
func ServeNATSProcess() {
	spec := os.Getenv(natsProcessEnv)
	if spec == "" {
		return
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "NATS process:", err)
		os.Exit(2)
	}
	parts := strings.Fields(spec)
	if len(parts) != 3 {
		fail(fmt.Errorf("%s=%q: want dir, port and key", natsProcessEnv, spec))
	}
	port, err := strconv.Atoi(parts[1])
	if err != nil {
		fail(err)
	}
	issuer, err := issuerOf(parts[2])
	if err != nil {
		fail(err)
	}
	if _, err := queue.StartEmbeddedNATSWith(parts[0], port, issuer); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	// Its standard input is a pipe from the test binary, which nothing
	// writes to: it ends when that process does, however it ends.
	io.Copy(io.Discard, os.Stdin) //nolint:errcheck // any end is the end
	os.Exit(0)
}

func issuerOf(key string) (*queue.CredentialIssuer, error) {
	b, err := hex.DecodeString(key)
	if err != nil {
		return nil, err
	}
	return queue.NewCredentialIssuerFromKey(b)
}

// StartNATSProcess starts a NATS process for t with gpuq's streams; it is
// killed at cleanup.
func StartNATSProcess(t testing.TB) *NATSProcess {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	p := &NATSProcess{dir: t.TempDir(), key: hex.EncodeToString(key), port: FreePort(t)}
	var err error
	if p.Issuer, err = issuerOf(p.key); err != nil {
		t.Fatal(err)
	}
	if p.Control, err = p.Issuer.Issue(queue.RoleControl); err != nil {
		t.Fatal(err)
	}
	p.URL = "nats://127.0.0.1:" + strconv.Itoa(p.port)
	t.Cleanup(func() { p.Kill(t) })
	p.Start(t)
	nc := p.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ensureStreams(t, js)
	nc.Close()
	return p
}

// Start starts the server, on its port and store directory, and waits until
// it accepts connections.
func (p *NATSProcess) Start(t testing.TB) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), natsProcessEnv+"="+p.dir+" "+strconv.Itoa(p.port)+" "+p.key)
	cmd.Stderr = os.Stderr
	// Held open until the process is killed: it serves while it lasts
	// (see ServeNATSProcess).
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("NATS process said %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(60 * time.Second):
		err = fmt.Errorf("NATS process not ready after 60s")
	}
	if err != nil {
		cmd.Process.Kill() //nolint:errcheck // it failed to start
		cmd.Wait()         //nolint:errcheck // killed
		t.Fatal(err)
	}
	p.cmd = cmd
}

// Kill SIGKILLs the server, as a crash would end it, and waits for it to
// exit.
func (p *NATSProcess) Kill(t testing.TB) {
	t.Helper()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Kill() //nolint:errcheck // it may have exited
	p.cmd.Wait()         //nolint:errcheck // killed
	p.cmd = nil
}

// URLFor is the client URL carrying cred.
func (p *NATSProcess) URLFor(cred queue.NATSCredential) string {
	return queue.URLWithCredential(p.URL, cred)
}

// Connect connects with the control plane's credential, reconnecting
// without end across restarts as gpuq's own processes do; closed at
// cleanup.
func (p *NATSProcess) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(p.URLFor(p.Control), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
