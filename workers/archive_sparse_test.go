package workers

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/gpuq/gpuq/queue"
)

// rawTarHeader is one 512-byte tar header block, checksum filled in, as a
// hostile tool writes it: tar.Writer refuses to write sparse entries, so the
// tests craft them byte by byte. gnu chooses the old GNU magic over POSIX
// ustar; fill sets the fields a format adds (the GNU sparse map).
func rawTarHeader(name string, typeflag byte, size int64, gnu bool, fill func(b []byte)) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:108], "0000644\x00")
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	copy(b[124:136], fmt.Sprintf("%011o\x00", size))
	copy(b[136:148], fmt.Sprintf("%011o\x00", 0))
	b[156] = typeflag
	if gnu {
		copy(b[257:265], "ustar  \x00")
	} else {
		copy(b[257:265], "ustar\x0000")
	}
	if fill != nil {
		fill(b)
	}
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// paxRecord is one "len key=value\n" record, len counting itself.
func paxRecord(key, value string) string {
	rest := " " + key + "=" + value + "\n"
	n := len(rest) + 1
	for len(strconv.Itoa(n))+len(rest) != n {
		n++
	}
	return strconv.Itoa(n) + rest
}

// padBlock pads b to a whole number of 512-byte blocks.
func padBlock(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}

// sparseArchive is a tar, compressed as Pack compresses, holding one file
// "holes" of realSize bytes of which only the last byte is stored: the rest
// is a hole its sparse map declares. format is "pax-1.0", "pax-0.1" or
// "gnu-old" (type 'S').
func sparseArchive(t *testing.T, format string, realSize int64) []byte {
	t.Helper()
	var raw []byte
	pax := func(records string, fileName string, stored []byte) {
		raw = append(raw, rawTarHeader("PaxHeaders.0/holes", tar.TypeXHeader, int64(len(records)), false, nil)...)
		raw = append(raw, padBlock([]byte(records))...)
		raw = append(raw, rawTarHeader(fileName, tar.TypeReg, int64(len(stored)), false, nil)...)
		raw = append(raw, padBlock(stored)...)
	}
	switch format {
	case "pax-1.0":
		// The sparse map leads the file's data, in its own block.
		records := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") +
			paxRecord("GNU.sparse.name", "holes") + paxRecord("GNU.sparse.realsize", strconv.FormatInt(realSize, 10))
		sparseMap := padBlock([]byte(fmt.Sprintf("1\n%d\n1\n", realSize-1)))
		pax(records, "GNUSparseFile.0/holes", append(sparseMap, 'x'))
	case "pax-0.1":
		records := paxRecord("GNU.sparse.major", "0") + paxRecord("GNU.sparse.minor", "1") +
			paxRecord("GNU.sparse.name", "holes") + paxRecord("GNU.sparse.size", strconv.FormatInt(realSize, 10)) +
			paxRecord("GNU.sparse.numblocks", "1") + paxRecord("GNU.sparse.map", fmt.Sprintf("%d,1", realSize-1))
		pax(records, "GNUSparseFile.0/holes", []byte{'x'})
	case "gnu-old":
		raw = rawTarHeader("holes", tar.TypeGNUSparse, 1, true, func(b []byte) {
			copy(b[386:398], fmt.Sprintf("%011o\x00", realSize-1)) // sparse[0].offset
			copy(b[398:410], fmt.Sprintf("%011o\x00", 1))          // sparse[0].numbytes
			copy(b[483:495], fmt.Sprintf("%011o\x00", realSize))   // realsize
		})
		raw = append(raw, padBlock([]byte{'x'})...)
	default:
		t.Fatalf("no sparse format %q", format)
	}
	raw = append(raw, make([]byte, 1024)...)
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(raw) //nolint:errcheck // a bytes.Buffer
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// bytesOnDisk sums the regular files under dir, by the larger of their
// length and the blocks they hold.
func bytesOnDisk(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, _ error) error {
		if d == nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		size := fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			size = max(size, st.Blocks*512)
		}
		n += size
		return nil
	})
	return n
}

func TestUnpackOfASparseArchiveNeverWritesPastTheLimitsItsHolesWouldExceed(t *testing.T) {
	t.Parallel()
	const huge = 1 << 40 // a TiB of holes, declared in a few hundred bytes
	for _, format := range []string{"pax-1.0", "pax-0.1"} {
		arch := sparseArchive(t, format, huge)
		if len(arch) > 1024 {
			t.Fatalf("%s: the crafted archive is %d bytes compressed, want a few hundred", format, len(arch))
		}
		// The archive is what it claims: Go's reader takes it as a regular
		// file of a TiB, which it expands on read (holes as zeros).
		zr, err := zstd.NewReader(bytes.NewReader(arch))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		hdr, err := tr.Next()
		if err != nil || hdr.Name != "holes" || hdr.Typeflag != tar.TypeReg || hdr.Size != huge {
			t.Fatalf("%s: the crafted archive reads as %+v (%v); want a regular file of %d bytes", format, hdr, err, int64(huge))
		}
		if n, err := io.CopyN(io.Discard, tr, 1<<20); n != 1<<20 || err != nil {
			t.Fatalf("%s: reading the holes: %d bytes, %v", format, n, err)
		}
		zr.Close()

		for _, c := range []struct {
			name     string
			size     int64
			lim      queue.ArchiveLimits
			key      string
			limit    int64
			maxWrite int64
		}{
			// A file declared past unpack_max_file_bytes is refused from
			// its header, before a byte is written.
			{"unpack_max_file_bytes 1 MiB", huge, queue.ArchiveLimits{MaxFileBytes: 1 << 20}, "storage.unpack_max_file_bytes", 1 << 20, 0},
			// With a file limit past its declared size, the bytes written
			// stop at unpack_max_bytes.
			{"unpack_max_bytes 1 MiB, no file limit", huge, queue.ArchiveLimits{MaxBytes: 1 << 20, MaxFileBytes: 2 * huge}, "storage.unpack_max_bytes", 1 << 20, 1 << 20},
			// Under the defaults a file within them is stopped by the
			// expansion ratio once past its floor.
			{"the defaults, 64 GiB", 64 << 30, queue.ArchiveLimits{}, "storage.unpack_max_ratio", 1000, queue.RatioFloor},
		} {
			target := t.TempDir()
			err := Unpack(bytes.NewReader(sparseArchive(t, format, c.size)), target, c.lim)
			var lerr *ArchiveLimitError
			if !errors.As(err, &lerr) || lerr.Key != c.key || lerr.Limit != c.limit || lerr.Entry != "holes" || !strings.Contains(err.Error(), c.key) {
				t.Fatalf("%s, %s: want a refusal naming %s (limit %d, at \"holes\"), got %v", format, c.name, c.key, c.limit, err)
			}
			if n := bytesOnDisk(t, target); n > c.maxWrite {
				t.Fatalf("%s, %s: %d bytes on disk, want at most %d", format, c.name, n, c.maxWrite)
			}
		}

		// Under the defaults a TiB is past the 100 GiB a file or an
		// archive may write, and is refused before a byte is written.
		target := t.TempDir()
		err = Unpack(bytes.NewReader(arch), target, queue.ArchiveLimits{})
		var lerr *ArchiveLimitError
		if !errors.As(err, &lerr) || lerr.Limit != 100<<30 || !strings.HasPrefix(lerr.Key, "storage.unpack_max_") || !strings.Contains(err.Error(), lerr.Key) {
			t.Fatalf("%s, the defaults: want a refusal naming the 100 GiB limit, got %v", format, err)
		}
		if n := bytesOnDisk(t, target); n != 0 {
			t.Fatalf("%s, the defaults: %d bytes on disk, want none", format, n)
		}
	}

	// The old GNU sparse type is refused as a kind of entry, before a byte
	// of it is written.
	arch := sparseArchive(t, "gnu-old", 1<<32)
	zr, err := zstd.NewReader(bytes.NewReader(arch))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	if hdr, err := tar.NewReader(zr).Next(); err != nil || hdr.Typeflag != tar.TypeGNUSparse || hdr.Size != 1<<32 {
		t.Fatalf("old GNU sparse: the crafted archive reads as %+v (%v); want a sparse file of 4 GiB", hdr, err)
	}
	target := t.TempDir()
	err = Unpack(bytes.NewReader(arch), target, queue.ArchiveLimits{MaxBytes: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), `"holes"`) || !strings.Contains(err.Error(), "'S'") {
		t.Fatalf("old GNU sparse: want a refusal naming the entry and its type, got %v", err)
	}
	if n := bytesOnDisk(t, target); n != 0 {
		t.Fatalf("old GNU sparse: %d bytes on disk, want none", n)
	}
}
