package workers

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A job that runs as a uid of its own takes the first program of its
// command's name in the worker's PATH that its user may run: root's PATH
// may start with a directory only root reaches (pyenv's shims under /root),
// and the same name further down (/usr/bin) is the one the job can use.
func TestAJobsCommandIsOneItsOwnUserMayRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the worker runs jobs as uids of their own only as root")
	}
	// Not t.TempDir: its parent is closed to other users.
	base, err := os.MkdirTemp("", "gpuq-command-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	program := func(d, name, body string, mode os.FileMode) string {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	private, public, other := dir("private", 0o700), dir("public", 0o755), dir("other", 0o755)
	// The job's gid is the worker's (root's); the files' group is the
	// test's, so group bits must not grant what other bits do not.
	program(private, "tool", "#!/bin/sh\necho private\n", 0o755)
	want := program(public, "tool", "#!/bin/sh\necho public\n", 0o755)
	program(private, "only-root", "#!/bin/sh\n", 0o755)
	program(other, "unreadable-script", "#!/bin/sh\n", 0o711)
	program(public, "unreadable-script", "#!/bin/sh\n", 0o711)
	t.Setenv("PATH", strings.Join([]string{"relative/bin", private, other, public}, string(os.PathListSeparator)))
	job := &JobUser{Name: "gpuq-job-70001", UID: 70001, GID: 70001}

	if got, err := commandPath("tool", job); err != nil || got != want {
		t.Fatalf("tool: got %q, %v; want %s, the one further down PATH the job may run", got, err, want)
	}
	// A script its interpreter may not read cannot run either.
	if _, err := commandPath("unreadable-script", job); err == nil || !strings.Contains(err.Error(), filepath.Join(other, "unreadable-script")+" is in the worker's PATH, but the job's user gpuq-job-70001 (uid 70001) may not run it") {
		t.Fatalf("unreadable-script: want an error naming the first one and the job's user, got %v", err)
	}
	if _, err := commandPath("only-root", job); err == nil || !strings.Contains(err.Error(), filepath.Join(private, "only-root")) {
		t.Fatalf("only-root: want an error naming it, got %v", err)
	}
	if _, err := commandPath("no-such-tool", job); !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("no-such-tool: want exec.ErrNotFound, got %v", err)
	}
	// A path, and a job of the worker's own user, are left to exec.
	for _, c := range []struct {
		name string
		u    *JobUser
	}{{filepath.Join(private, "tool"), job}, {"./tool", job}, {"tool", nil}} {
		if got, err := commandPath(c.name, c.u); err != nil || got != c.name {
			t.Fatalf("%s: got %q, %v; want it as given", c.name, got, err)
		}
	}
}
