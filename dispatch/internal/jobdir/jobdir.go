// Package jobdir keeps the files the Worker writes beside a job's mounted
// /job folder, which the container never sees: the held note naming the
// lock the run holds, and the copy of the job's output. A worker restarted
// after a crash reads them back to settle the jobs its dead process held.
package jobdir

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
)

// NoteName is the held note's file in a job's folder under the worker's
// jobs dir. It sits beside the mounted /job folder, so the container never
// sees the token.
const NoteName = "held.json"

// OutputName is the job's output, beside its held note.
const OutputName = "output.log"

// maxNote bounds how much of a held note is read at boot.
const maxNote = 4 << 10

// Note is the content of a held note.
type Note struct {
	Queue string `json:"queue"`
	JobID string `json:"jobId"`
	Token string `json:"token"`
	// Attempt is the attempt the run is (0 in notes of older versions: the
	// queue's count then decides).
	Attempt int `json:"attempt,omitempty"`
}

// WriteNote writes dir's held note, readable by its owner only.
func WriteNote(dir string, n Note) error {
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, NoteName), b, 0o600)
}

// ReadNote reads a job folder's note; ok is false when there is none or
// it is not one of ours (a crash before the note was written: nothing ran).
func ReadNote(dir string) (Note, bool) {
	f, err := os.Open(filepath.Join(dir, NoteName))
	if err != nil {
		return Note{}, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxNote+1))
	if err != nil || len(data) > maxNote {
		return Note{}, false
	}
	var n Note
	if json.Unmarshal(data, &n) != nil || n.Queue == "" || n.JobID == "" || n.Token == "" {
		return Note{}, false
	}
	return n, true
}

// ReadTail is the last n bytes of a file, nil when it cannot be read.
func ReadTail(path string, n int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil
	}
	off := max(info.Size()-n, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, info.Size()-off))
	if err != nil {
		return nil
	}
	return b
}
