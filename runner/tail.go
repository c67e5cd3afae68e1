package runner

import (
	"bufio"
	"io"
	"os"
	"sync"
)

// tailBuffer keeps the last max bytes written to it, in amortised constant
// time per byte: it appends into a buffer of twice the bound and slides the
// kept tail to the front when that fills.
type tailBuffer struct {
	max   int
	buf   []byte
	total int64
}

func newTailBuffer(max int) *tailBuffer {
	return &tailBuffer{max: max, buf: make([]byte, 0, 2*max)}
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	t.total += int64(n)
	if t.max <= 0 {
		return n, nil
	}
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if len(t.buf)+len(p) > cap(t.buf) {
		keep := t.max - len(p)
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-keep:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// Bytes returns a copy of the kept tail.
func (t *tailBuffer) Bytes() []byte {
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
	}
	return append([]byte(nil), b...)
}

// truncated reports whether more was written than is kept.
func (t *tailBuffer) truncated() bool { return t.total > int64(len(t.Bytes())) }

// outputFile captures a job's output, holding the file to at most max
// bytes: when a write would pass it, the newest half of what the file holds
// is slid to the front and the rest dropped, so the file always ends with
// the job's last output (the exit line) and each byte is moved at most once
// per max/2 bytes written. A write error is remembered and later writes are
// dropped: the job's output must keep draining (or the container would
// block on a full pipe) whatever happens to the file.
type outputFile struct {
	mu   sync.Mutex
	f    *os.File
	w    *bufio.Writer
	max  int64
	size int64 // bytes written to the file or its buffer
	err  error
}

func createOutputFile(path string, max int64) (*outputFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	// O_CREATE's mode applies only to a new file; an existing one keeps its
	// mode unless tightened here.
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return nil, err
	}
	return &outputFile{f: f, w: bufio.NewWriterSize(f, 32<<10), max: max}, nil
}

func (o *outputFile) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(p)
	if o.err != nil {
		return n, nil
	}
	if int64(len(p)) >= o.max {
		p = p[int64(len(p))-o.max:]
		o.err = o.keepTail(0)
	} else if o.size+int64(len(p)) > o.max {
		o.err = o.keepTail(min(o.size, o.max/2, o.max-int64(len(p))))
	}
	if o.err == nil {
		_, o.err = o.w.Write(p)
		o.size += int64(len(p))
	}
	if o.err == nil { // at once: a transcript follows the file while the job runs
		o.err = o.w.Flush()
	}
	return n, nil
}

// keepTail moves the last keep bytes of the file to its front and cuts the
// rest. The copy runs front to back, so a chunk is read before anything
// overwrites it (the source always lies after the destination).
func (o *outputFile) keepTail(keep int64) error {
	if err := o.w.Flush(); err != nil {
		return err
	}
	if keep > 0 {
		buf := make([]byte, 64<<10)
		src := o.size - keep
		for done := int64(0); done < keep; {
			k := min(int64(len(buf)), keep-done)
			if _, err := o.f.ReadAt(buf[:k], src+done); err != nil {
				return err
			}
			if _, err := o.f.WriteAt(buf[:k], done); err != nil {
				return err
			}
			done += k
		}
	}
	if err := o.f.Truncate(keep); err != nil {
		return err
	}
	if _, err := o.f.Seek(keep, io.SeekStart); err != nil {
		return err
	}
	o.size = keep
	o.w.Reset(o.f)
	return nil
}

// Close flushes and closes the file and returns the first error seen.
func (o *outputFile) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil {
		o.err = o.w.Flush()
	}
	if err := o.f.Close(); o.err == nil {
		o.err = err
	}
	return o.err
}

var _ io.Writer = (*tailBuffer)(nil)
