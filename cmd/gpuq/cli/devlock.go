package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// devLockFile is the lock `gpuq dev` holds in each directory it owns.
const devLockFile = "dev.lock"

// lockDevDirs makes this process the owner of dirs: it holds an exclusive
// lock on dir/dev.lock in each, which names its pid. The kernel releases
// the lock when the process ends, however it ends, so a crashed dev blocks
// nothing; a second dev in the same directory fails, naming the first.
func lockDevDirs(dirs ...string) (release func(), err error) {
	var files []*os.File
	release = func() {
		for _, f := range files {
			f.Close()
		}
	}
	seen := map[string]bool{}
	for _, dir := range dirs {
		abs, err := filepath.Abs(dir)
		if err != nil {
			release()
			return nil, err
		}
		if seen[abs] {
			continue
		}
		seen[abs] = true
		if err := os.MkdirAll(abs, 0o700); err != nil {
			release()
			return nil, err
		}
		path := filepath.Join(abs, devLockFile)
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			release()
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			holder, _ := os.ReadFile(path)
			f.Close()
			release()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				pid := strings.TrimSpace(string(holder))
				if pid == "" {
					pid = "unknown"
				}
				return nil, fmt.Errorf("gpuq dev is already running in %s (pid %s, see %s); stop it or use another --data-dir and directory", abs, pid, path)
			}
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		files = append(files, f)
		if err := f.Truncate(0); err == nil {
			_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		if err != nil {
			release()
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return release, nil
}
