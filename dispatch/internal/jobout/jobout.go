// Package jobout reads what a job wrote to its output folder (/job/out) for
// the host to carry out. The folder is the job's, so nothing in it is
// trusted: a file is read only when it is a regular file (never a link, a
// FIFO or a device), bounded in bytes, and its content is checked by its
// reader before anything is done with it.
package jobout

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Name is the folder's name inside the job's mounted folder: /job/out.
const Name = "out"

// ErrAbsent is a file the job did not write.
var ErrAbsent = errors.New("not written")

// Read reads dir/name: a regular file of at most max bytes. A file that is
// absent is ErrAbsent; a link, a FIFO, a device, a folder or a larger file
// is an error saying which. name must be a plain file name.
func Read(dir, name string, max int64) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return nil, fmt.Errorf("%q: not a plain file name", name)
	}
	f, err := openNoFollow(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrAbsent
	}
	if err != nil {
		return nil, fmt.Errorf("%s: not a regular file (%w)", name, pathless(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, pathless(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", name, fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, pathless(err))
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, max)
	}
	return data, nil
}

// pathless is err without the host path an *fs.PathError names: a refusal's
// reason goes to the record and to the job's status comment on the forge,
// which must not learn where the host keeps its jobs.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Make creates the output folder in the job's folder (0700; the caller
// hands it to the container's user).
func Make(jobDir string) (string, error) {
	dir := filepath.Join(jobDir, Name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	return dir, nil
}
