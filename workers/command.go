package workers

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// commandPath finds the program a job's command names, as exec.Command
// does, in the worker's PATH. A job that runs as a uid of its own (a worker
// running as root) cannot run what only root may reach: root's PATH often
// starts with directories under /root (pyenv's shims, a conda install),
// and finding python3 there would fail the job with "permission denied"
// where /usr/bin/python3 was further down the same PATH. So for such a job
// the first program of the name that the job's user can run is taken, and
// when there is none but root's, the error says so. For a job that runs as
// the worker's own user (u nil), name is returned as it is, for
// exec.Command to find.
func commandPath(name string, u *JobUser) (string, error) {
	if u == nil || strings.Contains(name, "/") {
		return name, nil
	}
	var rootOnly string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if !filepath.IsAbs(dir) {
			// exec.LookPath refuses a program found through a relative
			// entry (exec.ErrDot); so does this.
			continue
		}
		p := filepath.Join(dir, name)
		info, err := os.Stat(p)
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			continue
		}
		if runnableBy(p, u) {
			return p, nil
		}
		if rootOnly == "" {
			rootOnly = p
		}
	}
	if rootOnly != "" {
		return "", fmt.Errorf("%s is in the worker's PATH, but the job's user %s (uid %d) may not run it: a worker running as root runs each job as a uid of its own; give the command's full path, or install it where every user may run it",
			rootOnly, u.Name, u.UID)
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// runnableBy reports whether u may run the program at p: search permission
// on every directory above it (and above what its links resolve to),
// execute permission on it, and read permission when it is a script, which
// its interpreter must read. The job has u's uid and gid and no
// supplementary groups.
func runnableBy(p string, u *JobUser) bool {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false
	}
	for _, path := range []string{p, real} {
		for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
			if !permitted(dir, u, 0o1) {
				return false
			}
			if dir == "/" {
				break
			}
		}
	}
	if !permitted(real, u, 0o1) {
		return false
	}
	return !isScript(real) || permitted(real, u, 0o4)
}

// permitted reports whether u has perm (0o4 read, 0o2 write, 0o1
// execute or search) on path by its mode bits.
func permitted(path string, u *JobUser, perm os.FileMode) bool {
	info, err := os.Stat(path)
	if err != nil {
		return false
	}
	mode := info.Mode().Perm()
	st, ok := info.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return false
	case st.Uid == u.UID:
		mode >>= 6
	case st.Gid == u.GID:
		mode >>= 3
	}
	return mode&perm != 0
}

// isScript reports whether the file at p starts with #!.
func isScript(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 2)
	_, err = io.ReadFull(f, head)
	return err == nil && string(head) == "#!"
}
