package workers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The control socket lets a running job ask its worker to commit a checkpoint
// synchronously: `gpuq checkpoint save` connects to $GPUQ_CONTROL_SOCKET,
// sends "save", and gets "ok <seq>" once the checkpoint directory is packed,
// uploaded and recorded, or "error <message>". The job must not modify
// GPUQ_CHECKPOINT_DIR until the command returns, so what is packed is exactly
// what the job committed.

// EnvControlSocket names the socket in the job's environment.
const EnvControlSocket = "GPUQ_CONTROL_SOCKET"

type controlServer struct {
	ln   net.Listener
	path string
}

// maxSocketPath keeps socket paths inside the kernel's limit (108 bytes on
// Linux, 104 on BSDs).
const maxSocketPath = 100

// listenControl opens a control socket in dir, served by save. A path too
// long for a socket falls back to the system temporary directory, or to
// /tmp when that one's name is too long as well.
func listenControl(dir string, save func(context.Context) (int, error)) (*controlServer, error) {
	path := filepath.Join(dir, "control.sock")
	if len(path) > maxSocketPath {
		var err error
		if path, err = shortSocketPath(); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("opening the control socket: %w", err)
	}
	s := &controlServer{ln: ln, path: path}
	go s.serve(save)
	return s, nil
}

// shortSocketPath is a fresh socket path short enough for the kernel.
func shortSocketPath() (string, error) {
	for _, dir := range []string{os.TempDir(), "/tmp"} {
		f, err := os.CreateTemp(dir, "gpuq-ctl-*.sock")
		if err != nil {
			continue
		}
		path := f.Name()
		f.Close()
		os.Remove(path)
		if len(path) <= maxSocketPath {
			return path, nil
		}
	}
	return "", fmt.Errorf("opening the control socket: neither $TMPDIR (%s) nor /tmp gives a socket path of at most %d bytes", os.TempDir(), maxSocketPath)
}

func (s *controlServer) serve(save func(context.Context) (int, error)) {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			conn.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck // best effort
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil {
				return
			}
			conn.SetReadDeadline(time.Time{}) //nolint:errcheck // best effort
			if strings.TrimSpace(line) != "save" {
				fmt.Fprintf(conn, "error unknown request %q\n", strings.TrimSpace(line))
				return
			}
			seq, err := save(context.Background())
			if err != nil {
				fmt.Fprintf(conn, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
				return
			}
			fmt.Fprintf(conn, "ok %d\n", seq)
		}()
	}
}

func (s *controlServer) Close() error {
	err := s.ln.Close()
	os.Remove(s.path)
	return err
}

// SaveCheckpoint asks the worker behind socket to commit the job's checkpoint
// directory and returns the recorded sequence number.
func SaveCheckpoint(ctx context.Context, socket string) (int, error) {
	if socket == "" {
		return 0, errors.New(EnvControlSocket + " is not set: `gpuq checkpoint save` must run inside a job started by a gpuq worker")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", filepath.Clean(socket))
	if err != nil {
		return 0, fmt.Errorf("reaching the worker: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl) //nolint:errcheck // best effort
	}
	if _, err := fmt.Fprintln(conn, "save"); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("waiting for the worker: %w", err)
	}
	line = strings.TrimSpace(line)
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return 0, errors.New(msg)
	}
	seqText, ok := strings.CutPrefix(line, "ok ")
	if !ok {
		return 0, fmt.Errorf("unexpected answer from the worker: %q", line)
	}
	return strconv.Atoi(seqText)
}
