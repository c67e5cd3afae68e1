package transcript

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/internal/atomicfile"
	"github.com/pidispatch/pidispatch/jobs"
)

// fileExt follows the record's member name: <stem>.attempt-<n>.transcript.jsonl.gz.
const fileExt = ".transcript.jsonl.gz"

// maxReadBytes bounds what Read decompresses: a stored transcript is at most
// MaxBytes plus its tail, but the file is only trusted as far as its size.
const maxReadBytes = 64 << 20

// FileName is the transcript file of one attempt, beside its record.
func FileName(jobID string, attempt int) string {
	return jobs.RecordMember("", jobID, attempt) + fileExt
}

// ErrNone: no transcript of that attempt is kept here.
var ErrNone = errors.New("no transcript kept")

// Read reads one attempt's stored transcript from dir. Lines that do not
// parse are skipped.
func Read(dir, jobID string, attempt int) ([]Entry, error) {
	f, err := os.Open(filepath.Join(dir, FileName(jobID, attempt)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: job %q attempt %d in %s", ErrNone, jobID, attempt, dir)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("transcript %s: %w", f.Name(), err)
	}
	return decodeAll(io.LimitReader(zr, maxReadBytes))
}

func decodeAll(r io.Reader) ([]Entry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxEntryBytes+1)
	var out []Entry
	for sc.Scan() {
		if e, err := decodeEntry(sc.Bytes()); err == nil {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return out, err
	}
	return out, nil
}

// Attempts lists the attempts of jobID with a transcript in dir, in order.
func Attempts(dir, jobID string) ([]int, error) {
	prefix := jobs.SanitizeJobID(jobID) + ".attempt-"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, fileExt) {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, prefix), fileExt))
		if err == nil && n > 0 && FileName(jobID, n) == name {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Prune removes the transcripts in dir last written before olderThan (the
// records' retention), and the temp files a crash left an hour or more ago.
func Prune(dir string, olderThan time.Time) (int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs []error
	for _, e := range ents {
		name := e.Name()
		temp := strings.HasPrefix(name, ".transcript-") && strings.HasSuffix(name, ".tmp")
		if !e.Type().IsRegular() || !(strings.HasSuffix(name, fileExt) && !strings.HasPrefix(name, ".") || temp) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		limit := olderThan
		if temp {
			limit = time.Now().Add(-time.Hour)
		}
		if !info.ModTime().Before(limit) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// writeAtomic writes data to dir/name in one step, so a reader never sees
// half a transcript.
func writeAtomic(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, name), data, 0o640, ".transcript-*.tmp")
}
