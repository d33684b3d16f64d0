package workers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// JobUser is the unprivileged user a worker running as root runs its jobs
// as: a job then cannot read the worker's credential, write outside its own
// directories or change the machine, and each attempt's directory is its
// own (mode 0700).
type JobUser struct {
	Name     string
	UID, GID uint32
}

func (u *JobUser) credential() *syscall.Credential {
	// No supplementary groups: root's are not the job's.
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
}

// chown gives paths to the job's user.
func (u *JobUser) chown(paths ...string) error {
	for _, p := range paths {
		if err := os.Lchown(p, int(u.UID), int(u.GID)); err != nil {
			return fmt.Errorf("handing %s to user %s: %w", p, u.Name, err)
		}
	}
	return nil
}

// chownTree gives dir and everything under it to the job's user.
func (u *JobUser) chownTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return u.chown(p)
	})
}

// blockedAbove is the first directory above path (or path itself, for a
// directory) that users other than its owner and group cannot enter, or "".
func blockedAbove(path string) string {
	for dir := path; ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err != nil || fi.IsDir() && fi.Mode().Perm()&0o001 == 0 {
			return dir
		}
		if dir == filepath.Dir(dir) {
			return ""
		}
	}
}

// prepareJobUser opens the worker's data directory to who, the jobs' users
// (each attempt's own directory below it is 0700 and its job's), and makes
// sure they can run the gpuq binary for `gpuq checkpoint save`: when they
// cannot reach the worker's, a link to it (or a copy, when the binary
// itself is not others' to run) is put in the data directory.
func prepareJobUser(cfg *Config, who string) error {
	if err := os.Chmod(cfg.DataDir, 0o711); err != nil {
		return err
	}
	if dir := blockedAbove(cfg.DataDir); dir != "" {
		return fmt.Errorf("worker.data-dir: jobs run as %s, who cannot enter %s; choose a --data-dir under directories others may enter (mode o+x), or --run-as root", who, dir)
	}
	exe := cfg.Executable
	fi, err := os.Stat(exe)
	othersRun := err == nil && fi.Mode().Perm()&0o001 != 0
	if othersRun && blockedAbove(filepath.Dir(exe)) == "" {
		return nil
	}
	bin := filepath.Join(cfg.DataDir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		return err
	}
	dst := filepath.Join(bin, "gpuq")
	os.Remove(dst)
	// A link shares the binary's mode, so it serves only when others may
	// run the binary and a directory above is what blocks them; otherwise
	// the job gets a copy of its own, leaving the worker's binary as it is.
	if !othersRun || os.Link(exe, dst) != nil {
		if err := copyExecutable(exe, dst); err != nil {
			return fmt.Errorf("worker.executable: %s cannot reach %s, and copying it for jobs failed: %w", who, exe, err)
		}
		if err := os.Chmod(dst, 0o755); err != nil {
			return err
		}
	}
	cfg.Executable = dst
	return nil
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// DefaultJobUIDs is the range a root worker runs its jobs' uids from when
// neither --job-uids nor --run-as is given: above every regular and system
// user, and outside systemd's dynamic service users (61184–65519), nobody
// (65534) and the usual /etc/subuid ranges (from 100000).
var DefaultJobUIDs = UIDRange{First: 70000, Last: 70999}

// UIDRange is a range of user ids, each a job's own user and group while
// it runs.
type UIDRange struct {
	First, Last uint32
}

// maxUIDRange bounds a range, and with it the worker's look-ups at start.
const maxUIDRange = 1 << 16

// ParseUIDRange parses "FIRST-LAST" (inclusive), e.g. "70000-70999".
func ParseUIDRange(s string) (UIDRange, error) {
	lo, hi, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return UIDRange{}, fmt.Errorf("want FIRST-LAST, e.g. 70000-70999, got %q", s)
	}
	first, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 32)
	if err1 != nil || err2 != nil {
		return UIDRange{}, fmt.Errorf("want FIRST-LAST of numeric uids, e.g. 70000-70999, got %q", s)
	}
	r := UIDRange{First: uint32(first), Last: uint32(last)}
	return r, r.check()
}

func (r UIDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Size is how many uids the range holds.
func (r UIDRange) Size() int { return int(r.Last) - int(r.First) + 1 }

func (r UIDRange) check() error {
	switch {
	case r.First == 0:
		return fmt.Errorf("%s includes uid 0 (root)", r)
	case r.Last < r.First:
		return fmt.Errorf("%s ends before it starts", r)
	case r.Last == math.MaxUint32:
		return fmt.Errorf("%s includes uid %d, which means no user", r, uint32(math.MaxUint32))
	case r.Size() > maxUIDRange:
		return fmt.Errorf("%s holds %d uids, over %d", r, r.Size(), maxUIDRange)
	}
	return nil
}

// validate checks the range serves slots jobs at once and that no user or
// group of the machine owns one of its ids: a job would have that user's
// files.
func (r UIDRange) validate(slots int) error {
	if err := r.check(); err != nil {
		return err
	}
	if r.Size() < slots {
		return fmt.Errorf("%s holds %d uids, fewer than worker.slots %d: each running job needs its own", r, r.Size(), slots)
	}
	for id := r.First; ; id++ {
		s := strconv.FormatUint(uint64(id), 10)
		if u, err := user.LookupId(s); err == nil {
			return fmt.Errorf("%s includes uid %d, user %s of this machine; choose ids no user or group has", r, id, u.Username)
		}
		if g, err := user.LookupGroupId(s); err == nil {
			return fmt.Errorf("%s includes gid %d, group %s of this machine; choose ids no user or group has", r, id, g.Name)
		}
		if id == r.Last {
			return nil
		}
	}
}

// uidPool hands each running attempt a uid of its own: the least recently
// used of the range that no other worker of the machine holds (a lock file
// per uid, held while the attempt runs), with every process a previous
// holder left behind killed first.
type uidPool struct {
	free    chan uint32
	lockDir string
}

// jobUIDLockDir holds one lock file per job uid, shared by every worker of
// the machine so that two workers never run jobs under the same uid.
func jobUIDLockDir() string {
	if fi, err := os.Stat("/run"); err == nil && fi.IsDir() {
		return "/run/gpuq/job-uids"
	}
	return filepath.Join(os.TempDir(), "gpuq-job-uids")
}

func newUIDPool(r UIDRange, lockDir string) (*uidPool, error) {
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		return nil, fmt.Errorf("worker.job-uids: creating the lock directory: %w", err)
	}
	p := &uidPool{free: make(chan uint32, r.Size()), lockDir: lockDir}
	for id := r.First; ; id++ {
		p.free <- id
		if id == r.Last {
			return p, nil
		}
	}
}

// take returns a uid of the pool and the function that gives it back; it
// waits while other workers of the machine hold every free one.
func (p *uidPool) take(ctx context.Context) (*JobUser, func(), error) {
	for {
	look:
		for range len(p.free) {
			var id uint32
			select {
			case id = <-p.free:
			default:
				break look
			}
			lock, err := p.lock(id)
			if err != nil {
				p.free <- id
				if errors.Is(err, syscall.EWOULDBLOCK) {
					continue
				}
				return nil, nil, err
			}
			// A job that left its process group (setsid) may have outlived
			// its attempt, even its worker: it must not meet the next job.
			if err := killUID(id); err != nil {
				lock.Close()
				p.free <- id
				return nil, nil, err
			}
			u := &JobUser{Name: "gpuq-job-" + strconv.FormatUint(uint64(id), 10), UID: id, GID: id}
			return u, func() {
				killUID(id) //nolint:errcheck // the next take kills again
				lock.Close()
				p.free <- id
			}, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, context.Cause(ctx)
		case <-time.After(time.Second):
		}
	}
}

func (p *uidPool) lock(id uint32) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(p.lockDir, strconv.FormatUint(uint64(id), 10)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking job uid %d: %w", id, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking job uid %d: %w", id, err)
	}
	return f, nil
}

// killUID SIGKILLs every process whose real, effective or saved uid is uid,
// until none is left (a process may fork while it is looked for).
func killUID(uid uint32) error {
	for range 50 {
		pids, err := processesOf(uid)
		if err != nil || len(pids) == 0 {
			return err
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // it may have exited
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("processes of job uid %d keep appearing after SIGKILL", uid)
}

// processesOf lists the live processes of uid from /proc.
func processesOf(uid uint32) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	want := strconv.FormatUint(uint64(uid), 10)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // exited
		}
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "State:\tZ") {
				break // a zombie is dead already, its parent's to reap
			}
			if ids, ok := strings.CutPrefix(line, "Uid:"); ok {
				f := strings.Fields(ids)
				if len(f) >= 3 && (f[0] == want || f[1] == want || f[2] == want) {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids, nil
}
