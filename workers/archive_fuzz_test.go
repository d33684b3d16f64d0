package workers

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuq/gpuq/queue"
)

// FuzzUnpack feeds Unpack arbitrary bytes, and arbitrary tar entries
// compressed as gpuq does: whatever it accepts, nothing lands outside the
// target and no link made resolves outside it.
func FuzzUnpack(f *testing.F) {
	f.Add([]byte("plain bytes"), "step", "", byte(tar.TypeReg))
	f.Add([]byte{}, "link", "../outside", byte(tar.TypeSymlink))
	f.Add([]byte("x"), "../escape", "", byte(tar.TypeReg))
	f.Add([]byte("x"), "a/b", "a", byte(tar.TypeSymlink))
	f.Add([]byte{}, "dev", "", byte(tar.TypeChar))
	f.Fuzz(func(t *testing.T, body []byte, name, link string, kind byte) {
		base := t.TempDir()
		target := filepath.Join(base, "target")
		lim := queue.ArchiveLimits{MaxBytes: 1 << 20, MaxFiles: 16}
		_ = Unpack(bytes.NewReader(body), target, lim)
		// Headers tar cannot encode are no archive an attacker can send.
		if arch, err := craftArchive(
			entry{hdr: tar.Header{Name: name, Typeflag: kind, Linkname: link, Mode: 0o644}, body: string(body)},
			entry{hdr: tar.Header{Name: name + "/f", Typeflag: tar.TypeReg, Mode: 0o644}, body: "f"}); err == nil {
			_ = Unpack(arch, target, lim)
		}
		entries, err := os.ReadDir(base)
		if err != nil || len(entries) != 1 {
			t.Fatalf("something was written beside the target: %v", entries)
		}
		linksStayInside(t, target)
	})
}
