package pgtemp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoServer is returned when no PostgreSQL server binaries can be found.
var ErrNoServer = errors.New("no PostgreSQL server binaries (initdb, pg_ctl) in PATH or /usr/lib/postgresql/*/bin")

// Options tune a private cluster. The zero value is ready for `gpuq dev`.
type Options struct {
	// Durable keeps fsync on. Tests turn it off for speed; `gpuq dev` keeps it
	// so that a crash loses nothing that was acknowledged. Default false.
	Durable bool
	// Port to listen on, on 127.0.0.1. Default: a free port.
	Port int
	// Log, when set, receives the server's log lines.
	Log *os.File
	// Password makes a new cluster ask every connection for the password
	// of its postgres user (scram-sha-256), generated at initdb and kept in
	// dir/password, mode 0600. A cluster made without one stays as it was.
	Password bool
	// Settings are more server settings, each name=value (passed as
	// -c name=value), for example to preload pg_stat_statements. A value
	// must not hold spaces.
	Settings []string
	// TakeOver stops a server still running in dir before starting: the
	// caller owns dir (gpuq dev holds its lock), so such a server was left
	// by a predecessor that crashed.
	TakeOver bool
}

// Cluster is a running private PostgreSQL cluster.
type Cluster struct {
	dir      string
	port     int
	bin      string
	runAs    *user.User
	password string
}

// passwordFile holds a cluster's generated password.
const passwordFile = "password"

// BinDir finds the directory that holds initdb and pg_ctl: PATH first, then
// the newest /usr/lib/postgresql/N/bin.
func BinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				real = p
			}
			return filepath.Dir(real), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", ErrNoServer
}

func versionOf(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// Start initialises dir (when it holds no cluster yet) and starts a server on
// 127.0.0.1. PostgreSQL refuses to run as root, so as root the cluster is
// owned by and run as the `postgres` user.
func Start(ctx context.Context, dir string, opts Options) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bin: bin, port: opts.Port}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running PostgreSQL as root is refused by the server and there is no postgres user: %w", err)
		}
		c.runAs = u
	}
	for _, kv := range opts.Settings {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" || strings.ContainsAny(kv, " \t\n'\"\\") {
			return nil, fmt.Errorf("pgtemp: setting %q: must be name=value without spaces or quotes", kv)
		}
	}
	if c.port == 0 {
		if c.port, err = choosePort(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := c.chown(dir); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	pwPath := filepath.Join(dir, passwordFile)
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		args := []string{"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale"}
		if opts.Password {
			pw := make([]byte, 24)
			if _, err := rand.Read(pw); err != nil {
				return nil, err
			}
			if err := os.WriteFile(pwPath, []byte(hex.EncodeToString(pw)+"\n"), 0o600); err != nil {
				return nil, err
			}
			if err := c.chown(pwPath); err != nil {
				return nil, err
			}
			args = []string{"-D", data, "-U", "postgres", "-A", "scram-sha-256", "--pwfile", pwPath, "-E", "UTF8", "--no-locale"}
		}
		if err := c.run(ctx, "initdb", args...); err != nil {
			return nil, fmt.Errorf("initdb %s: %w", data, err)
		}
	}
	if b, err := os.ReadFile(pwPath); err == nil {
		c.password = strings.TrimSpace(string(b))
	}
	if opts.TakeOver {
		if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err == nil {
			// pg_ctl status fails when no server runs; a stale pid file
			// is then removed by the start below.
			if c.run(ctx, "pg_ctl", "-D", data, "status") == nil {
				if err := c.run(ctx, "pg_ctl", "-D", data, "-m", "fast", "-w", "stop"); err != nil {
					return nil, fmt.Errorf("stopping the server left running in %s: %w", data, err)
				}
			}
		}
	}
	// Clients connect over TCP only. A Unix socket would live in dir, and
	// neither a path over the 107 bytes a socket's name may hold nor one
	// with a space (pg_ctl passes these settings through a shell) could
	// hold it, which would keep gpuq dev from starting in such a place.
	logFile := filepath.Join(dir, "postgres.log")
	// A free port found here may be taken by another process before the
	// server binds it; a port chosen here is then chosen again.
	for try := 1; ; try++ {
		settings := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k '' -c max_connections=200", c.port)
		if !opts.Durable {
			settings += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
		}
		for _, kv := range opts.Settings {
			settings += " -c " + kv
		}
		start, _ := os.Stat(logFile)
		err := c.run(ctx, "pg_ctl", "-D", data, "-l", logFile, "-o", settings, "-w", "-t", "60", "start")
		if err == nil {
			return c, nil
		}
		log, _ := os.ReadFile(logFile)
		if start != nil && int64(len(log)) >= start.Size() {
			log = log[start.Size():] // this try's lines
		}
		if opts.Port != 0 || try == portTries || !bytes.Contains(log, []byte("Address already in use")) {
			return nil, fmt.Errorf("starting PostgreSQL in %s: %w\n%s", data, err, tail(log, 2000))
		}
		if c.port, err = choosePort(); err != nil {
			return nil, err
		}
	}
}

// choosePort chooses the port of a cluster started without one.
var choosePort = freePort

// portTries bounds how often Start chooses a port again when the one it
// chose was taken before the server bound it.
const portTries = 5

// URL is the connection string of the cluster's `postgres` database.
func (c *Cluster) URL() string { return c.DatabaseURL("postgres") }

// DatabaseURL is the connection string of one database of the cluster.
func (c *Cluster) DatabaseURL(name string) string {
	if c.password != "" {
		return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/%s?sslmode=disable", c.password, c.port, name)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, name)
}

// Stop shuts the server down fast, keeping its data.
func (c *Cluster) Stop() error { return c.stop("fast") }

// Crash stops the server as a crash would: every server process aborts at
// once, without a checkpoint (pg_ctl stop -m immediate), so that the next
// Start on the same directory recovers from the write-ahead log.
func (c *Cluster) Crash() error { return c.stop("immediate") }

// stop runs pg_ctl stop in mode.
func (c *Cluster) stop(mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return c.run(ctx, "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", mode, "-w", "stop")
}

// Port is the port the server listens on.
func (c *Cluster) Port() int { return c.port }

// Destroy stops the server and removes its directory.
func (c *Cluster) Destroy() error {
	stopErr := c.Stop()
	return errors.Join(stopErr, os.RemoveAll(c.dir))
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.Dir = c.dir
	if c.runAs != nil {
		uid, _ := strconv.Atoi(c.runAs.Uid)
		gid, _ := strconv.Atoi(c.runAs.Gid)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		cmd.Env = append(os.Environ(), "HOME="+c.dir, "USER=postgres")
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, tail(out.Bytes(), 2000))
	}
	return nil
}

// chown hands dir to the postgres user when running as root; the parent
// directories must be traversable for it too.
func (c *Cluster) chown(dir string) error {
	if c.runAs == nil {
		return nil
	}
	uid, _ := strconv.Atoi(c.runAs.Uid)
	gid, _ := strconv.Atoi(c.runAs.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return err
	}
	for p := filepath.Dir(dir); p != "/" && p != "."; p = filepath.Dir(p) {
		info, err := os.Stat(p)
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, info.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("making %s traversable for the postgres user: %w", p, err)
			}
		}
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
