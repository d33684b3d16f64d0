package workers

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
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

// prepareJobUser opens the worker's data directory to the job's user (each
// attempt's own directory below it is 0700 and the job's) and makes sure the
// job can run the gpuq binary for `gpuq checkpoint save`: when it cannot
// reach the worker's, a link to it (or a copy, when the binary itself is
// not others' to run) is put in the data directory.
func prepareJobUser(cfg *Config) error {
	u := cfg.JobUser
	if err := os.Chmod(cfg.DataDir, 0o711); err != nil {
		return err
	}
	if dir := blockedAbove(cfg.DataDir); dir != "" {
		return fmt.Errorf("worker.data-dir: jobs run as user %s, who cannot enter %s; choose a --data-dir under directories others may enter (mode o+x), or --run-as root", u.Name, dir)
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
			return fmt.Errorf("worker.executable: user %s cannot reach %s, and copying it for jobs failed: %w", u.Name, exe, err)
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
