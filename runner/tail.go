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

// outputFile captures a job's whole output. A write error is remembered and
// later writes are dropped: the job's output must keep draining (or the
// container would block on a full pipe) whatever happens to the file.
type outputFile struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	err error
}

func createOutputFile(path string) (*outputFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	// O_CREATE's mode applies only to a new file; an existing one keeps its
	// mode unless tightened here.
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return nil, err
	}
	return &outputFile{f: f, w: bufio.NewWriterSize(f, 32<<10)}, nil
}

func (o *outputFile) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil {
		_, o.err = o.w.Write(p)
	}
	if o.err == nil { // at once: a transcript follows the file while the job runs
		o.err = o.w.Flush()
	}
	return len(p), nil
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
