package workers

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
)

// writeFiles makes the files of files (path: content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func packDir(t *testing.T, dir string) (*Workdir, []string) {
	t.Helper()
	var warnings []string
	w, err := PackWorkdir(dir, t.TempDir(), queue.DefaultWorkdirMaxBytes, func(msg string) { warnings = append(warnings, msg) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Remove() }) //nolint:errcheck // a temporary file
	return w, warnings
}

// archiveNames lists a tar.gz's entries in order.
func archiveNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if !gz.ModTime.IsZero() || gz.Name != "" {
		t.Fatalf("the gzip header carries a time %v or name %q", gz.ModTime, gz.Name)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		if hdr.ModTime.Unix() != 0 || hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" || hdr.Gname != "" {
			t.Fatalf("%s carries a time, owner or owner name: %+v", hdr.Name, hdr)
		}
		names = append(names, hdr.Name)
	}
	return names
}

func TestAPackedWorkingDirectoryIsTheSameBytesForTheSameFilesAndLeavesOutWhatBelongsToThisMachine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"train.py": "print('hi')\n", "data/in.txt": "42\n", "lib/util.py": "x = 1\n",
		".gpuq/config.yaml": "token: secret\n", ".git/HEAD": "ref\n", "lib/__pycache__/util.pyc": "bytecode",
		".ipynb_checkpoints/nb.ipynb": "{}", "sub/.venv/bin/python": "elf",
	})
	if err := os.Symlink("data/in.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../outside", filepath.Join(dir, "lib", "up")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, warnings := packDir(t, dir)
	names := archiveNames(t, w.Path)
	want := []string{"data/", "data/in.txt", "lib/", "lib/util.py", "link", "sub/", "train.py"}
	if !slices.Equal(names, want) {
		t.Fatalf("entries %q, want %q", names, want)
	}
	slices.Sort(warnings)
	wantWarn := []string{
		"left out lib/up: a symlink to ../../outside, outside the directory",
		"left out passwd: a symlink to /etc/passwd, outside the directory",
		"left out pipe: a named pipe, not a file, directory or symlink",
	}
	if !slices.Equal(warnings, wantWarn) {
		t.Fatalf("warnings %q, want %q", warnings, wantWarn)
	}
	if !strings.HasPrefix(w.Digest(), queue.WorkdirPrefix) || len(w.SHA256) != 64 {
		t.Fatalf("digest %q", w.Digest())
	}

	// Touched, the same; changed, another.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "train.py"), later, later); err != nil {
		t.Fatal(err)
	}
	again, _ := packDir(t, dir)
	if again.SHA256 != w.SHA256 {
		t.Fatalf("packing unchanged files again gave %s, then %s", w.SHA256, again.SHA256)
	}
	writeFiles(t, dir, map[string]string{"train.py": "print('changed')\n"})
	changed, _ := packDir(t, dir)
	if changed.SHA256 == w.SHA256 {
		t.Fatal("a changed file left the digest as it was")
	}

	// Unpacked as a worker unpacks it: the files, the link inside.
	out := filepath.Join(t.TempDir(), "workdir")
	f, err := os.Open(changed.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Unpack(f, out, queue.ArchiveLimits{}); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"train.py": "print('changed')\n", "data/in.txt": "42\n", "link": "42\n", "lib/util.py": "x = 1\n"} {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || string(got) != content {
			t.Fatalf("%s unpacked as %q (%v), want %q", name, got, err, content)
		}
	}
	if _, err := os.Lstat(filepath.Join(out, ".gpuq")); !os.IsNotExist(err) {
		t.Fatalf("gpuq dev's directory was shipped: %v", err)
	}
}

func TestATooLargeWorkingDirectorySaysWhatMakesItSoWithoutPackingItAll(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"train.py": "print('hi')\n", "model.pt": "weights", ".git/big": strings.Repeat("x", 1<<20)})
	// Data that does not compress, so that the archive is as large as it.
	data := make([]byte, 200<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "a.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	_, err := PackWorkdir(dir, tmp, 64<<10, nil)
	want := "workdir " + dir + " packs to over 64 KiB (its files hold 200 KiB), more than an upload may be (storage.workdir_max_bytes); largest: data/ 200 KiB, train.py 12 B, model.pt 7 B"
	if err == nil || err.Error() != want {
		t.Fatalf("want\n%s\ngot\n%v", want, err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("a refused archive was left behind: %v", left)
	}
	w, err := PackWorkdir(dir, tmp, 1<<20, nil)
	if err != nil || w.Bytes < 200<<10 || w.Bytes > 1<<20 {
		t.Fatalf("under the limit: %+v, %v", w, err)
	}
	w.Remove() //nolint:errcheck // a temporary file
	if _, err := PackWorkdir(filepath.Join(dir, "train.py"), tmp, 1<<20, nil); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Fatalf("packing a file: %v", err)
	}
}

func TestUnpackRefusesAGzipArchiveLeavingTheDirectory(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	tw.WriteHeader(&tar.Header{Name: "../escape", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}) //nolint:errcheck // checked by reading back
	tw.Write([]byte("x"))                                                                       //nolint:errcheck // as above
	tw.Close()
	gz.Close()
	dir := t.TempDir()
	err := Unpack(&buf, filepath.Join(dir, "inner"), queue.ArchiveLimits{})
	if !errors.Is(err, ErrArchiveRefused) || !strings.Contains(err.Error(), "leaves the target directory") {
		t.Fatalf("want a refusal, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "escape")); !os.IsNotExist(err) {
		t.Fatal("the entry was written outside the target")
	}
	// A truncated gzip stream is refused, not half unpacked silently.
	err = Unpack(bytes.NewReader([]byte{0x1f, 0x8b, 8, 0}), filepath.Join(dir, "other"), queue.ArchiveLimits{})
	if !errors.Is(err, ErrArchiveRefused) {
		t.Fatalf("a truncated gzip stream: %v", err)
	}
}

func TestAGpuqignoreLeavesOutWhatItNamesAndRefusesWhatItCannotMean(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		".gpuqignore": "# large or local things\n\ndata/\n/notes.md\n*.ckpt\n  outputs/*.pt  \nwandb\n",
		"train.py":    "print('hi')\n", "data/a.csv": "1", "sub/data/b.csv": "2", "sub/data-2/c.csv": "3",
		"notes.md": "mine", "sub/notes.md": "theirs", "a.ckpt": "w", "sub/b.ckpt": "w",
		"outputs/x.pt": "w", "outputs/x.txt": "t", "outputs/deep/y.pt": "w",
		"wandb/run.log": "l", "sub/wandb": "a file named wandb",
		"lib/data": "a file named data",
	})
	w, _ := packDir(t, dir)
	want := []string{".gpuqignore", "lib/", "lib/data", "outputs/", "outputs/deep/", "outputs/deep/y.pt", "outputs/x.txt",
		"sub/", "sub/data-2/", "sub/data-2/c.csv", "sub/notes.md", "train.py"}
	if got := archiveNames(t, w.Path); !slices.Equal(got, want) {
		t.Fatalf("entries\n%q\nwant\n%q", got, want)
	}
	again, _ := packDir(t, dir)
	if again.SHA256 != w.SHA256 {
		t.Fatal("packing the same files twice gave two digests")
	}

	for line, why := range map[string]string{
		"!keep.txt": "negation (!) is not supported",
		"[!a]*":     "negated classes ([! or [^) are not supported",
		"[^a]*":     "negated classes ([! or [^) are not supported",
		"**/x":      "** is not supported; a pattern without / matches at any depth",
		"[ab":       "malformed pattern",
		"/":         "malformed pattern",
		"a//b":      "malformed pattern",
		`\*.txt`:    "backslash escapes are not supported",
	} {
		bad := t.TempDir()
		writeFiles(t, bad, map[string]string{".gpuqignore": "# first\n" + line + "\n", "train.py": "x"})
		_, err := PackWorkdir(bad, t.TempDir(), queue.DefaultWorkdirMaxBytes, nil)
		want := "workdir " + bad + ": .gpuqignore line 2: " + strconv.Quote(line) + ": " + why
		if err == nil || err.Error() != want {
			t.Errorf("%s: want\n%s\ngot\n%v", line, want, err)
		}
	}
}
