package workers

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/klauspost/compress/zstd"

	"github.com/gpuq/gpuq/queue"
)

// Archive is a packed directory in a local file, ready to upload.
type Archive struct {
	Path   string
	Bytes  int64
	SHA256 string
	Files  int
	// LeftOut names the entries that were not packed: links that resolve
	// outside the directory (a dataset elsewhere on the machine) and
	// sockets, FIFOs and devices. At most maxLeftOutNames are named;
	// LeftOutCount counts them all.
	LeftOut      []string
	LeftOutCount int
}

// maxLeftOutNames bounds the names an Archive keeps of what it left out.
const maxLeftOutNames = 20

func (a *Archive) leaveOut(path string) {
	if a.LeftOutCount++; len(a.LeftOut) < maxLeftOutNames {
		a.LeftOut = append(a.LeftOut, path)
	}
}

// Remove deletes the local file.
func (a *Archive) Remove() error { return os.Remove(a.Path) }

// Pack writes dir (or only paths inside it) as one tar+zstd archive into a
// temporary file under tmpDir and returns its size and sha256. Many small files
// become one object, which is what object stores handle well.
func Pack(dir string, paths []string, tmpDir string) (*Archive, error) {
	f, err := os.CreateTemp(tmpDir, "pack-*.tar.zst")
	if err != nil {
		return nil, err
	}
	a := &Archive{Path: f.Name()}
	h := sha256.New()
	counter := &countingWriter{w: io.MultiWriter(f, h)}
	err = writeArchive(counter, dir, paths, a)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(a.Path)
		return nil, fmt.Errorf("packing %s: %w", dir, err)
	}
	a.Bytes = counter.n
	a.SHA256 = hex.EncodeToString(h.Sum(nil))
	return a, nil
}

func writeArchive(w io.Writer, dir string, paths []string, a *Archive) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	if len(paths) == 0 {
		paths = []string{"."}
	}
	// Everything is read through root: a path that reaches outside dir
	// through a symlink (a checkpoint.paths entry "data/x" where data links
	// to /etc) is an error, never a host file packed.
	fsys := root.FS()
	for _, p := range paths {
		p = filepath.ToSlash(filepath.Clean(p))
		if !filepath.IsLocal(p) && p != "." {
			return fmt.Errorf("path %q leaves %s", p, dir)
		}
		if _, err := root.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		err := fs.WalkDir(fsys, p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if path == "." {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if info.Mode()&fs.ModeSymlink != 0 {
				// A link is packed only when it resolves inside dir: one
				// to a dataset elsewhere on the machine is the machine's,
				// not the job's, and unpacking refuses it.
				if _, err := root.Stat(path); err != nil {
					a.leaveOut(path)
					return nil
				}
				if link, err = root.Readlink(path); err != nil {
					return err
				}
			} else if !info.Mode().IsRegular() && !info.IsDir() {
				a.leaveOut(path)
				return nil
			}
			hdr, err := tar.FileInfoHeader(info, link)
			if err != nil {
				return err
			}
			hdr.Name = path
			hdr.Uname, hdr.Gname = "", ""
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if !info.Mode().IsRegular() {
				return nil
			}
			a.Files++
			src, err := root.Open(path)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		})
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// ErrArchiveRefused is what every refusal of Unpack matches (errors.Is): an
// entry that would leave the directory, a kind of entry archives may not
// hold, a link outside, a broken limit, a malformed archive. Asking again
// cannot succeed.
var ErrArchiveRefused = errors.New("archive refused")

// refusal is a refusal of Unpack, worded for the user.
type refusal struct{ msg string }

func (r *refusal) Error() string        { return r.msg }
func (r *refusal) Is(target error) bool { return target == ErrArchiveRefused }

func refusef(format string, args ...any) error {
	return &refusal{msg: fmt.Sprintf(format, args...)}
}

// ArchiveLimitError says which of the unpacking limits an archive broke.
type ArchiveLimitError struct {
	// Key is the limit's configuration key (storage.unpack_max_bytes, …).
	Key   string
	Limit int64
	Entry string
}

// Is makes an ArchiveLimitError match ErrArchiveRefused.
func (e *ArchiveLimitError) Is(target error) bool { return target == ErrArchiveRefused }

func (e *ArchiveLimitError) Error() string {
	what := map[string]string{
		"storage.unpack_max_bytes":      "more than %d bytes in all",
		"storage.unpack_max_file_bytes": "a file of more than %d bytes",
		"storage.unpack_max_files":      "more than %d entries",
		"storage.unpack_max_ratio":      "more than %d times its compressed size",
	}[e.Key]
	return fmt.Sprintf("unpacking: the archive expands to "+what+" (at %q); %s raises the limit", e.Limit, e.Entry, e.Key)
}

// Unpack extracts a tar+zstd or tar+gzip archive into dir (created if missing). The
// archive is treated as hostile: nothing is written outside dir whatever
// its entries say (a name with "..", a symlink followed by a file beneath
// it or of the same name); only regular files, directories and symlinks
// that resolve to something inside dir are unpacked, and hard links,
// devices and other kinds are refused; modes keep the permission bits
// only (no setuid, setgid or sticky); and lim bounds the bytes, the
// entries and the expansion ratio, the error naming the limit broken.
func Unpack(r io.Reader, dir string, lim queue.ArchiveLimits) error {
	// A file limit left to default is the total's: name the key that
	// raises it.
	fileKey := "storage.unpack_max_file_bytes"
	if lim.MaxFileBytes == 0 {
		fileKey = "storage.unpack_max_bytes"
	}
	lim = lim.WithDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	in := &countingReader{r: r}
	// Checkpoints and outputs are tar+zstd; a working directory a client
	// packed is tar+gzip, which every language's standard library writes.
	br := bufio.NewReader(in)
	var plain io.Reader
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return refusef("unpacking: %v", err)
		}
		defer gz.Close()
		plain = gz
	} else {
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(128<<20))
		if err != nil {
			return err
		}
		defer zr.Close()
		plain = zr
	}
	tr := tar.NewReader(plain)
	u := &unpacker{root: root, lim: lim, in: in, fileKey: fileKey}
	// Links are made last, once every file is written, so no entry of the
	// archive is ever written through one.
	var links []*tar.Header
	for entries := 0; ; entries++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return refusef("unpacking: %v", err)
		}
		if entries >= lim.MaxFiles {
			return &ArchiveLimitError{Key: "storage.unpack_max_files", Limit: int64(lim.MaxFiles), Entry: hdr.Name}
		}
		name := filepath.Clean(filepath.FromSlash(strings.TrimLeft(hdr.Name, "/")))
		if !filepath.IsLocal(name) {
			if name == "." && hdr.Typeflag == tar.TypeDir {
				continue
			}
			return refusef("unpacking: entry %q leaves the target directory", hdr.Name)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return fmt.Errorf("unpacking %q: %w", hdr.Name, err)
			}
		case tar.TypeSymlink:
			links = append(links, hdr)
		case tar.TypeReg:
			if err := u.file(hdr, name, tr); err != nil {
				return err
			}
		default:
			return refusef("unpacking: entry %q is a %s; archives hold only files, directories and symlinks", hdr.Name, entryKind(hdr.Typeflag))
		}
	}
	for _, hdr := range links {
		if err := u.link(hdr); err != nil {
			return err
		}
	}
	return nil
}

// unpacker writes one archive's entries under root, within its limits.
type unpacker struct {
	root    *os.Root
	lim     queue.ArchiveLimits
	in      *countingReader
	written int64
	// fileKey names the per-file limit in errors.
	fileKey string
}

func (u *unpacker) file(hdr *tar.Header, name string, r io.Reader) error {
	if hdr.Size > u.lim.MaxFileBytes {
		return &ArchiveLimitError{Key: u.fileKey, Limit: u.lim.MaxFileBytes, Entry: hdr.Name}
	}
	if dir := filepath.Dir(name); dir != "." {
		if err := u.root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("unpacking %q: %w", hdr.Name, err)
		}
	}
	// A symlink already in the directory is replaced, never written through.
	if fi, err := u.root.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if err := u.root.Remove(name); err != nil {
			return fmt.Errorf("unpacking %q: %w", hdr.Name, err)
		}
	}
	f, err := u.root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, fs.FileMode(hdr.Mode)&0o777|0o600)
	if err != nil {
		return fmt.Errorf("unpacking %q: %w", hdr.Name, err)
	}
	_, err = io.Copy(&limitedWriter{w: f, u: u, entry: hdr.Name}, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		var lerr *ArchiveLimitError
		if errors.As(err, &lerr) {
			return err
		}
		return fmt.Errorf("unpacking %q: %w", hdr.Name, err)
	}
	return nil
}

func (u *unpacker) link(hdr *tar.Header) error {
	name := filepath.Clean(filepath.FromSlash(strings.TrimLeft(hdr.Name, "/")))
	target := filepath.FromSlash(hdr.Linkname)
	if filepath.IsAbs(target) || !filepath.IsLocal(filepath.Join(filepath.Dir(name), target)) {
		return refusef("unpacking: symlink %q points to %q, outside the target directory", hdr.Name, hdr.Linkname)
	}
	if dir := filepath.Dir(name); dir != "." {
		if err := u.root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("unpacking %q: %w", hdr.Name, err)
		}
	}
	if err := u.root.Symlink(target, name); err != nil {
		return fmt.Errorf("unpacking %q: %w", hdr.Name, err)
	}
	// Resolved through the links already made, it must still land inside
	// (a link through another link can climb out where its text does not).
	if _, err := u.root.Stat(name); err != nil {
		u.root.Remove(name)
		return refusef("unpacking: symlink %q points to %q, which is not inside the target directory: %v", hdr.Name, hdr.Linkname, err)
	}
	return nil
}

// limitedWriter counts what one file writes against the archive's limits.
type limitedWriter struct {
	w     io.Writer
	u     *unpacker
	entry string
	n     int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	u := l.u
	switch {
	case l.n+int64(len(p)) > u.lim.MaxFileBytes:
		return 0, &ArchiveLimitError{Key: u.fileKey, Limit: u.lim.MaxFileBytes, Entry: l.entry}
	case u.written+int64(len(p)) > u.lim.MaxBytes:
		return 0, &ArchiveLimitError{Key: "storage.unpack_max_bytes", Limit: u.lim.MaxBytes, Entry: l.entry}
	case u.written+int64(len(p)) > queue.RatioFloor && u.written+int64(len(p)) > u.lim.MaxRatio*max(u.in.n, 1):
		return 0, &ArchiveLimitError{Key: "storage.unpack_max_ratio", Limit: u.lim.MaxRatio, Entry: l.entry}
	}
	n, err := l.w.Write(p)
	l.n += int64(n)
	u.written += int64(n)
	return n, err
}

func entryKind(t byte) string {
	switch t {
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "named pipe"
	}
	return fmt.Sprintf("entry of type %q", t)
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
