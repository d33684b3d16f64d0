package workers

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Archive is a packed directory in a local file, ready to upload.
type Archive struct {
	Path   string
	Bytes  int64
	SHA256 string
	Files  int
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
	err = writeArchive(counter, dir, paths, &a.Files)
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

func writeArchive(w io.Writer, dir string, paths []string, files *int) error {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	if len(paths) == 0 {
		paths = []string{"."}
	}
	for _, p := range paths {
		root := filepath.Join(dir, p)
		if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(dir, path)
			if err != nil || rel == "." {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if info.Mode()&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(path); err != nil {
					return err
				}
			}
			hdr, err := tar.FileInfoHeader(info, link)
			if err != nil {
				return err
			}
			hdr.Name = filepath.ToSlash(rel)
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if !info.Mode().IsRegular() {
				return nil
			}
			*files++
			src, err := os.Open(path)
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

// Unpack extracts a tar+zstd archive into dir, refusing entries that would
// land outside it.
func Unpack(r io.Reader, dir string) error {
	zr, err := zstd.NewReader(r)
	if err != nil {
		return err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unpacking: %w", err)
		}
		target := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("unpacking: entry %q leaves the target directory", hdr.Name)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fs.FileMode(hdr.Mode)&0o777)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
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
