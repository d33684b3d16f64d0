package workers

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
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
	if err := Unpack(f, dst); err != nil {
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
	if err := Unpack(f, dst); err != nil {
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
	err := Unpack(&buf, filepath.Join(dir, "inner"))
	if err == nil || !strings.Contains(err.Error(), "leaves the target directory") {
		t.Fatalf("want a refusal, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "escape")); !os.IsNotExist(err) {
		t.Fatal("the entry was written outside the target")
	}
}
