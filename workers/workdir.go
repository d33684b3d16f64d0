package workers

import (
	"archive/tar"
	"cmp"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dustin/go-humanize"

	"github.com/gpuq/gpuq/queue"
)

// WorkdirLeftOut are the names a packed working directory leaves out at any
// depth: version control, gpuq dev's own directory (its credentials),
// caches and virtual environments, which belong to the machine they were
// made on. The Python client leaves out the same.
var WorkdirLeftOut = []string{".git", ".gpuq", "__pycache__", ".ipynb_checkpoints", ".venv"}

// Workdir is a working directory packed for upload: a gzip-compressed tar
// in a local file.
type Workdir struct {
	Path   string
	SHA256 string
	Bytes  int64
}

// Remove deletes the packed file.
func (w *Workdir) Remove() error { return os.Remove(w.Path) }

// Digest is what a spec's workdir names it by.
func (w *Workdir) Digest() string { return queue.WorkdirPrefix + w.SHA256 }

// errPastLimit stops packing once the archive is past its limit.
var errPastLimit = errors.New("past the limit")

// limitWriter fails a write that would take what it has written past
// limit.
type limitWriter struct {
	w     io.Writer
	n     int64
	limit int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n+int64(len(p)) > l.limit {
		return 0, errPastLimit
	}
	k, err := l.w.Write(p)
	l.n += int64(k)
	return k, err
}

// PackWorkdir packs dir into a gzip-compressed tar in tmpDir (the system's
// temporary directory when empty), the same bytes for the same files
// however often it is packed: entries in the order of their names, no
// modification times, owners or modes beyond the permission bits. Regular
// files, directories and symlinks that stay inside dir are packed; the
// names of WorkdirLeftOut are left out silently, and anything else (a
// symlink out of dir, a socket, a device) is left out and named to warn.
// Packing stops once the archive passes limit bytes (a directory holding a
// data set is not compressed whole to be refused), with an error naming
// the directory's largest entries.
func PackWorkdir(dir, tmpDir string, limit int64, warn func(string)) (*Workdir, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("workdir: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("workdir: %s is not a directory", dir)
	}
	f, err := os.CreateTemp(tmpDir, "gpuq-workdir-*.tar.gz")
	if err != nil {
		return nil, err
	}
	out := &Workdir{Path: f.Name()}
	h := sha256.New()
	limited := &limitWriter{w: io.MultiWriter(f, h), limit: limit}
	gz, _ := gzip.NewWriterLevel(limited, gzip.DefaultCompression)
	tw := tar.NewWriter(gz)
	ignore, err := readIgnore(dir, root)
	if err == nil {
		err = walkWorkdir(root, ignore, warn, func(hdr *tar.Header, path string) error { return writeEntry(tw, hdr, path) })
	}
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = gz.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		var refused *ignoreError
		switch {
		case errors.Is(err, errPastLimit):
			return nil, tooLarge(dir, root, ignore, limit)
		case errors.As(err, &refused):
			return nil, err
		}
		return nil, fmt.Errorf("packing %s: %w", dir, err)
	}
	out.SHA256, out.Bytes = hex.EncodeToString(h.Sum(nil)), limited.n
	return out, nil
}

// walkWorkdir calls entry with the tar header of each entry of root that
// is packed, in the order of their names: not those of WorkdirLeftOut, nor
// those ignore matches.
func walkWorkdir(root string, ignore []ignoreRule, warn func(string), entry func(hdr *tar.Header, path string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == root {
			return nil
		}
		if slices.Contains(WorkdirLeftOut, d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if slices.ContainsFunc(ignore, func(r ignoreRule) bool { return r.matches(name, d.Name(), d.IsDir()) }) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		hdr := &tar.Header{Name: name, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch t := d.Type(); {
		case t.IsDir():
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, name+"/", 0o755
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, int64(info.Mode().Perm()), info.Size()
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if filepath.IsAbs(target) || !filepath.IsLocal(filepath.Join(filepath.Dir(rel), target)) {
				if warn != nil {
					warn(fmt.Sprintf("left out %s: a symlink to %s, outside the directory", name, target))
				}
				return nil
			}
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, filepath.ToSlash(target), 0o777
		default:
			if warn != nil {
				warn(fmt.Sprintf("left out %s: a %s, not a file, directory or symlink", name, entryKindOf(t)))
			}
			return nil
		}
		return entry(hdr, path)
	})
}

// writeEntry writes hdr, and a regular file's content from path, to tw.
func writeEntry(tw *tar.Writer, hdr *tar.Header, path string) error {
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	if _, err := io.CopyN(tw, src, hdr.Size); err != nil {
		return fmt.Errorf("%s: %w (did it change while it was packed?)", hdr.Name, err)
	}
	return nil
}

// entryKindOf names a file type that is not packed.
func entryKindOf(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// tooLarge refuses root, which packs to more than limit, naming what its
// files hold and its largest top-level entries, so that one can see what
// to move out of it.
func tooLarge(dir, root string, ignore []ignoreRule, limit int64) error {
	sizes := map[string]int64{}
	var total int64
	err := walkWorkdir(root, ignore, nil, func(hdr *tar.Header, _ string) error {
		top, _, nested := strings.Cut(hdr.Name, "/")
		if nested {
			top += "/"
		}
		sizes[top] += hdr.Size
		total += hdr.Size
		return nil
	})
	if err != nil {
		return fmt.Errorf("packing %s: %w", dir, err)
	}
	tops := slices.Collect(maps.Keys(sizes))
	slices.SortFunc(tops, func(a, b string) int {
		if c := cmp.Compare(sizes[b], sizes[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var largest []string
	for _, name := range tops[:min(3, len(tops))] {
		largest = append(largest, name+" "+humanize.IBytes(uint64(sizes[name])))
	}
	return fmt.Errorf("workdir %s packs to over %s (its files hold %s), more than an upload may be (storage.workdir_max_bytes); largest: %s",
		dir, humanize.IBytes(uint64(limit)), humanize.IBytes(uint64(total)), strings.Join(largest, ", "))
}

// WorkdirIgnoreFile, at the root of a working directory, lists what else
// to leave out, a pattern a line (see readIgnore).
const WorkdirIgnoreFile = ".gpuqignore"

// ignoreRule is one pattern of a WorkdirIgnoreFile.
type ignoreRule struct {
	pattern string
	// dirOnly: the line ended in "/", matching directories only.
	dirOnly bool
	// fromRoot: the pattern holds a "/" or began with one, and is matched
	// against an entry's path from the root, segment by segment; else
	// against its name, at any depth.
	fromRoot bool
}

// matches reports whether the entry at rel, named name, is left out.
func (r ignoreRule) matches(rel, name string, isDir bool) bool {
	if r.dirOnly && !isDir {
		return false
	}
	against := name
	if r.fromRoot {
		against = rel
	}
	ok, _ := path.Match(r.pattern, against) // checked by readIgnore
	return ok
}

// ignoreError is a WorkdirIgnoreFile line that cannot be read as a
// pattern.
type ignoreError struct {
	dir, line, why string
	n              int
}

func (e *ignoreError) Error() string {
	return fmt.Sprintf("workdir %s: %s line %d: %q: %s", e.dir, WorkdirIgnoreFile, e.n, e.line, e.why)
}

// readIgnore reads the patterns of root's WorkdirIgnoreFile, if it has
// one: a pattern a line, blank lines and lines starting with # skipped; a
// trailing / matches directories only; a leading / anchors the pattern at
// the root; a pattern with a / matches an entry's path from the root,
// segment by segment, one without its name at any depth; within a segment
// *, ? and [a-z] as in path.Match. Negation (!), negated classes, ** and
// backslash escapes are refused rather than read otherwise than their
// author meant, and so is an empty segment, which no path has. The Python
// client reads the file alike.
func readIgnore(dir, root string) ([]ignoreRule, error) {
	data, err := os.ReadFile(filepath.Join(root, WorkdirIgnoreFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workdir %s: %w", dir, err)
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("workdir %s: %s is not UTF-8 text", dir, WorkdirIgnoreFile)
	}
	var rules []ignoreRule
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		refuse := func(why string) error { return &ignoreError{dir: dir, line: line, why: why, n: i + 1} }
		switch {
		case strings.HasPrefix(line, "!"):
			return nil, refuse("negation (!) is not supported")
		case strings.Contains(line, "**"):
			return nil, refuse("** is not supported; a pattern without / matches at any depth")
		case strings.Contains(line, "[!") || strings.Contains(line, "[^"):
			return nil, refuse("negated classes ([! or [^) are not supported")
		case strings.Contains(line, `\`):
			return nil, refuse("backslash escapes are not supported")
		}
		r := ignoreRule{pattern: line}
		r.pattern, r.dirOnly = strings.CutSuffix(r.pattern, "/")
		var anchored bool
		r.pattern, anchored = strings.CutPrefix(r.pattern, "/")
		r.fromRoot = anchored || strings.Contains(r.pattern, "/")
		if _, err := path.Match(r.pattern, ""); err != nil || slices.Contains(strings.Split(r.pattern, "/"), "") {
			return nil, refuse("malformed pattern")
		}
		rules = append(rules, r)
	}
	return rules, nil
}
