package workers

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/gpuq/gpuq/queue"
)

func TestPackThenUnpackRestoresTheDirectory(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	files := map[string]string{"step": "7\n", "ckpt/model.bin": strings.Repeat("w", 100000), "ckpt/opt/state": "adam"}
	for name, body := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	arch, err := Pack(src, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if arch.Files != 3 || len(arch.SHA256) != 64 || arch.Bytes <= 0 || arch.Bytes > 10000 {
		t.Fatalf("unexpected archive: %+v", arch)
	}
	f, err := os.Open(arch.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dst := t.TempDir()
	if err := Unpack(f, dst, queue.ArchiveLimits{}); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(got) != body {
			t.Fatalf("%s: got %d bytes (%v), want %d", name, len(got), err, len(body))
		}
	}
	again, err := Pack(src, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if again.SHA256 != arch.SHA256 {
		t.Fatal("packing the same directory twice must give the same hash")
	}
}

func TestPackOnlyTheConfiguredPaths(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "keep"), 0o755)
	os.WriteFile(filepath.Join(src, "keep", "a"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(src, "scratch"), []byte("big"), 0o644)
	arch, err := Pack(src, []string{"keep", "missing"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(arch.Path)
	defer f.Close()
	dst := t.TempDir()
	if err := Unpack(f, dst, queue.ArchiveLimits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dst, "scratch")); !os.IsNotExist(err) {
		t.Fatal("a path outside checkpoint.paths must not be packed")
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "keep", "a")); string(b) != "a" {
		t.Fatal("checkpoint.paths must be packed")
	}
}

func TestUnpackRefusesEntriesThatLeaveTheDirectory(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	zw, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "../escape", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("x"))
	tw.Close()
	zw.Close()
	dir := t.TempDir()
	err := Unpack(&buf, filepath.Join(dir, "inner"), queue.ArchiveLimits{})
	if err == nil || !strings.Contains(err.Error(), "leaves the target directory") {
		t.Fatalf("want a refusal, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "escape")); !os.IsNotExist(err) {
		t.Fatal("the entry was written outside the target")
	}
}

// hostileArchive writes entries as a crafted archive would: headers as
// given, bodies where given.
func hostileArchive(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	buf, err := craftArchive(entries...)
	if err != nil {
		t.Fatal(err)
	}
	return buf
}

func craftArchive(entries ...entry) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	zw, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	zw.Close()
	return &buf, nil
}

type entry = struct {
	hdr  tar.Header
	body string
}

func TestUnpackNeverWritesOutsideTheDirectory(t *testing.T) {
	t.Parallel()
	cases := map[string][]entry{
		"a symlink then a file beneath it": {
			{hdr: tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "../outside"}},
			{hdr: tar.Header{Name: "link/file", Mode: 0o644, Typeflag: tar.TypeReg}, body: "pwned"},
		},
		"a symlink then a file of the same name": {
			{hdr: tar.Header{Name: "victim", Typeflag: tar.TypeSymlink, Linkname: "../outside/victim"}},
			{hdr: tar.Header{Name: "victim", Mode: 0o644, Typeflag: tar.TypeReg}, body: "pwned"},
		},
		"a relative link that climbs out": {
			{hdr: tar.Header{Name: "sub/up", Typeflag: tar.TypeSymlink, Linkname: "../../outside"}},
		},
		"an absolute link": {
			{hdr: tar.Header{Name: "abs", Typeflag: tar.TypeSymlink, Linkname: "/etc"}},
		},
		"a link whose text stays inside but climbs out through another link": {
			{hdr: tar.Header{Name: "a/b/s", Typeflag: tar.TypeSymlink, Linkname: "../.."}},
			{hdr: tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "a/b/s/.."}},
		},
		"a hard link": {
			{hdr: tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "../outside/victim"}},
		},
		"a device": {
			{hdr: tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666}},
		},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			os.MkdirAll(outside, 0o755)
			os.WriteFile(filepath.Join(outside, "victim"), []byte("safe"), 0o644)
			target := filepath.Join(base, "target")
			err := Unpack(hostileArchive(t, entries...), target, queue.ArchiveLimits{})
			b, _ := os.ReadFile(filepath.Join(outside, "victim"))
			if string(b) != "safe" {
				t.Fatalf("a file outside was overwritten: %q", b)
			}
			if got, _ := os.ReadDir(outside); len(got) != 1 {
				t.Fatalf("something was written outside: %v", got)
			}
			if err == nil {
				// Only a harmless reading is acceptable: every link that
				// was made resolves inside the target.
				linksStayInside(t, target)
			} else if !errors.Is(err, ErrArchiveRefused) {
				// The worker fails the job on a refusal rather than hand
				// it round the pool, so a refusal must say it is one.
				t.Fatalf("a refusal must match ErrArchiveRefused, got %v", err)
			}
		})
	}
}

func TestUnpackKeepsLinksThatStayInsideAndDropsSetuid(t *testing.T) {
	t.Parallel()
	target := t.TempDir()
	err := Unpack(hostileArchive(t,
		entry{hdr: tar.Header{Name: "blobs/x", Mode: 0o4755, Typeflag: tar.TypeReg}, body: "weights"},
		entry{hdr: tar.Header{Name: "snap/model", Typeflag: tar.TypeSymlink, Linkname: "../blobs/x"}},
	), target, queue.ArchiveLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(target, "snap", "model")); string(b) != "weights" {
		t.Fatalf("a link inside must be kept, read %q", b)
	}
	fi, _ := os.Stat(filepath.Join(target, "blobs", "x"))
	if fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v: setuid must be dropped, permissions kept", fi.Mode())
	}
}

func TestUnpackLimitsNameTheLimitBroken(t *testing.T) {
	t.Parallel()
	zeros := strings.Repeat("\x00", 256<<20)
	bomb := hostileArchive(t, entry{hdr: tar.Header{Name: "zeros", Mode: 0o644, Typeflag: tar.TypeReg}, body: zeros})
	if bomb.Len() > 64<<10 {
		t.Fatalf("the bomb is %d bytes compressed", bomb.Len())
	}
	two := func() *bytes.Buffer {
		return hostileArchive(t, entry{hdr: tar.Header{Name: "a", Mode: 0o644, Typeflag: tar.TypeReg}, body: strings.Repeat("a", 600)},
			entry{hdr: tar.Header{Name: "b", Mode: 0o644, Typeflag: tar.TypeReg}, body: strings.Repeat("b", 600)})
	}
	for _, c := range []struct {
		name string
		arch *bytes.Buffer
		lim  queue.ArchiveLimits
		key  string
	}{
		{"a compression bomb under the defaults", bomb, queue.ArchiveLimits{}, "storage.unpack_max_ratio"},
		{"total bytes", two(), queue.ArchiveLimits{MaxBytes: 1000}, "storage.unpack_max_bytes"},
		{"bytes of one file", two(), queue.ArchiveLimits{MaxFileBytes: 500}, "storage.unpack_max_file_bytes"},
		{"entries", two(), queue.ArchiveLimits{MaxFiles: 1}, "storage.unpack_max_files"},
		// One file over the total, with the file limit left to default
		// (the total): the key to raise is the total's.
		{"one file over the total", two(), queue.ArchiveLimits{MaxBytes: 500}, "storage.unpack_max_bytes"},
		{"every archive is refused as such", two(), queue.ArchiveLimits{MaxFiles: 1}, ""},
	} {
		target := t.TempDir()
		err := Unpack(c.arch, target, c.lim)
		var lerr *ArchiveLimitError
		if c.key == "" {
			if !errors.Is(err, ErrArchiveRefused) {
				t.Fatalf("%s: a broken limit must match ErrArchiveRefused, got %v", c.name, err)
			}
			continue
		}
		if !errors.As(err, &lerr) || lerr.Key != c.key || !strings.Contains(err.Error(), c.key) {
			t.Fatalf("%s: want a refusal naming %s, got %v", c.name, c.key, err)
		}
		var written int64
		filepath.WalkDir(target, func(_ string, d os.DirEntry, _ error) error {
			if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
				written += fi.Size()
			}
			return nil
		})
		if written > queue.RatioFloor+1<<20 {
			t.Fatalf("%s: %d bytes written before the refusal", c.name, written)
		}
	}
	if err := Unpack(two(), t.TempDir(), queue.ArchiveLimits{MaxBytes: 1200, MaxFiles: 2}); err != nil {
		t.Fatalf("an archive at its limits must unpack: %v", err)
	}
}

func TestPackNeverPacksAHostFileThroughALink(t *testing.T) {
	t.Parallel()
	host := t.TempDir()
	os.WriteFile(filepath.Join(host, "secret"), []byte("host"), 0o600)
	src := t.TempDir()
	os.Symlink(host, filepath.Join(src, "data"))
	os.Symlink(filepath.Join(host, "secret"), filepath.Join(src, "secret"))
	os.WriteFile(filepath.Join(src, "step"), []byte("3"), 0o644)
	if _, err := Pack(src, []string{"data/secret"}, t.TempDir()); err == nil {
		t.Fatal("a checkpoint.paths entry through a link to outside must be refused")
	}
	arch, err := Pack(src, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(arch.Path)
	defer f.Close()
	dst := t.TempDir()
	if err := Unpack(f, dst, queue.ArchiveLimits{}); err != nil {
		t.Fatalf("what Pack writes must unpack: %v", err)
	}
	if arch.Files != 1 {
		t.Fatalf("packed %d files, want only step", arch.Files)
	}
	if arch.LeftOutCount != 2 || !slices.Equal(arch.LeftOut, []string{"data", "secret"}) {
		t.Fatalf("the archive must name what it left out: %d %q", arch.LeftOutCount, arch.LeftOut)
	}
	for _, name := range []string{"data", "secret"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); !os.IsNotExist(err) {
			t.Fatalf("%s, a link to the host, was packed", name)
		}
	}
}

// linksStayInside fails t for a link under target that resolves outside
// it, or not at all.
func linksStayInside(t *testing.T, target string) {
	t.Helper()
	filepath.WalkDir(target, func(p string, d os.DirEntry, _ error) error {
		if d != nil && d.Type()&os.ModeSymlink != 0 {
			real, err := filepath.EvalSymlinks(p)
			if err != nil || !strings.HasPrefix(real, target+string(filepath.Separator)) {
				t.Errorf("link %s resolves to %q (%v), outside the target", p, real, err)
			}
		}
		return nil
	})
}
