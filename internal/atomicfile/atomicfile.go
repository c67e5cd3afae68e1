// Package atomicfile replaces a file in one step: a reader sees the old file
// or the whole new one, never half of it, and a crash leaves one of the two.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data: it writes a temporary file in path's folder
// (named by pattern, as os.CreateTemp names it), gives it perm, syncs it,
// renames it over path and syncs the folder, so the rename outlasts a crash.
// On an error the temporary file is removed and path is unchanged.
func Write(path string, data []byte, perm os.FileMode, pattern string) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	syncDir(dir)
	return nil
}

// syncDir makes a rename in dir durable. A failure loses nothing already
// visible, so it is not an error of the write.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}
