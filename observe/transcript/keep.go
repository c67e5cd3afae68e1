package transcript

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// Sink receives a running attempt's entries as they come, already redacted
// (*Live writes them to Valkey). It is called from the one goroutine that
// follows the attempt and must bound its own time.
type Sink interface {
	Append(ctx context.Context, jobID string, entries []Entry) error
}

// Config tunes a Store.
type Config struct {
	// Dir is where transcripts are stored: the run records' folder
	// (PI_LOGS_DIR). Required.
	Dir string
	// MaxBytes bounds a stored transcript, uncompressed; past it only the
	// last 256 KiB of the output are kept. Defaults to MaxBytesDefault.
	MaxBytes int
	// Live, when set, receives each attempt's entries while it runs.
	Live Sink
	// Poll is how often the output file is read. Defaults to 250 ms.
	Poll time.Duration
	// Logger gets the store's events; Host is on each line.
	Logger *slog.Logger
	Host   string
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Store keeps the transcripts of one worker's attempts. It implements
// dispatch.Transcripts. Safe for concurrent use.
type Store struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	running map[runKey]*keeper
}

type runKey struct {
	job     string
	attempt int
}

var _ dispatch.Transcripts = (*Store)(nil)

// NewStore checks cfg and returns a Store.
func NewStore(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("transcript: Config.Dir is empty")
	}
	if cfg.MaxBytes < 0 || cfg.Poll < 0 {
		return nil, errors.New("transcript: MaxBytes and Poll must not be negative")
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = MaxBytesDefault
	}
	if cfg.Poll == 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Store{cfg: cfg, log: cfg.Logger.With("host", cfg.Host), running: map[runKey]*keeper{}}, nil
}

// Keep follows run's output file until the returned keeper is closed.
func (s *Store) Keep(ctx context.Context, run dispatch.TranscriptRun) dispatch.TranscriptKeeper {
	// The keeper outlives the caller's cancel (its last lines and the end
	// entry are written after the job stops), never its values.
	base := context.WithoutCancel(ctx)
	ctx, cancel := context.WithCancel(base)
	k := &keeper{
		s: s, run: run, base: base, red: NewRedactor(run.Redact), cancel: cancel, done: make(chan struct{}),
		log: s.log.With("jobId", run.JobID, "attempt", run.Attempt),
	}
	k.gz = gzip.NewWriter(&k.buf)
	s.mu.Lock()
	s.running[runKey{run.JobID, run.Attempt}] = k
	s.mu.Unlock()
	go k.follow(ctx)
	return k
}

// ModelCall adds a model call to a running attempt's transcript. A call of
// an attempt not running here is dropped.
func (s *Store) ModelCall(jobID string, attempt int, c Call, at time.Time) {
	s.mu.Lock()
	k := s.running[runKey{jobID, attempt}]
	s.mu.Unlock()
	if k == nil {
		return
	}
	k.mu.Lock()
	k.add(Entry{At: at.UnixMilli(), Kind: KindModel, Attempt: attempt, Call: &c})
	k.mu.Unlock()
}

// keeper follows one attempt.
type keeper struct {
	s      *Store
	run    dispatch.TranscriptRun
	base   context.Context // the caller's context without its cancel
	red    *Redactor
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	err    error

	mu      sync.Mutex
	buf     bytes.Buffer // the gzip stream
	gz      *gzip.Writer
	written int      // uncompressed bytes in gz
	tail    [][]byte // encoded entries past MaxBytes, at most tailBytes
	tailLen int
	dropped int     // entries left out between the head and the tail
	pending []Entry // for the live sink
	liveErr bool    // the sink's last append failed (logged once)
}

// Close stops following, reads the rest of the output, and stores the
// transcript.
func (k *keeper) Close() error {
	k.once.Do(func() {
		k.cancel()
		<-k.done
		k.err = k.store()
		k.s.mu.Lock()
		delete(k.s.running, runKey{k.run.JobID, k.run.Attempt})
		k.s.mu.Unlock()
	})
	return k.err
}

// follow reads the output file every Poll until ctx ends, then once more
// to its end.
func (k *keeper) follow(ctx context.Context) {
	defer close(k.done)
	var f *os.File
	defer func() {
		if f != nil {
			_ = f.Close()
		}
	}()
	lines := lineSplitter{red: k.red}
	t := time.NewTicker(k.s.cfg.Poll)
	defer t.Stop()
	chunk := make([]byte, 64<<10)
	for {
		stopping := ctx.Err() != nil
		if f == nil && k.run.OutputFile != "" {
			var err error
			if f, err = os.Open(k.run.OutputFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
				k.log.Warn("transcript_output_unreadable", "err", err)
			}
		}
		if f != nil {
			for {
				n, err := f.Read(chunk)
				if n > 0 {
					k.addLines(lines.write(chunk[:n]))
				}
				if err != nil || n == 0 {
					if err != nil && !errors.Is(err, io.EOF) {
						k.log.Warn("transcript_output_unreadable", "err", err)
					}
					break
				}
			}
			k.followCut(f, &lines)
		}
		if stopping {
			k.addLines(lines.flush())
			k.flushLive(true)
			return
		}
		k.flushLive(false)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// followCut starts over from the file's beginning when the runtime cut it
// to its tail (PI_JOB_OUTPUT_MAX): the file is then shorter than what was
// read of it, and what it holds is the newest output.
func (k *keeper) followCut(f *os.File, lines *lineSplitter) {
	at, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return
	}
	st, err := f.Stat()
	if err != nil || st.Size() >= at {
		return
	}
	k.addLines(lines.flush())
	k.addLines([]string{"[pidispatch: the output was cut to its tail here (PI_JOB_OUTPUT_MAX); some lines may repeat]"})
	_, _ = f.Seek(0, io.SeekStart)
}

func (k *keeper) addLines(lines []string) {
	if len(lines) == 0 {
		return
	}
	at := k.s.cfg.Now().UnixMilli()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, l := range lines {
		k.add(Entry{At: at, Kind: KindOut, Attempt: k.run.Attempt, Line: l})
	}
}

// add appends e to the transcript (the head while under MaxBytes, then the
// tail) and to the live batch. k.mu is held.
func (k *keeper) add(e Entry) {
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	b = append(b, '\n')
	if len(k.pending) < 10_000 {
		k.pending = append(k.pending, e)
	}
	if k.written+len(b) <= k.s.cfg.MaxBytes && k.tail == nil {
		_, _ = k.gz.Write(b)
		k.written += len(b)
		return
	}
	if k.tail == nil {
		k.tail = [][]byte{}
	}
	k.tail = append(k.tail, b)
	k.tailLen += len(b)
	for k.tailLen > tailBytes && len(k.tail) > 1 {
		k.tailLen -= len(k.tail[0])
		k.tail = k.tail[1:]
		k.dropped++
	}
}

// flushLive hands the batch to the live sink, bounded; last adds the end
// marker.
func (k *keeper) flushLive(last bool) {
	if k.s.cfg.Live == nil {
		return
	}
	k.mu.Lock()
	batch := k.pending
	k.pending = nil
	k.mu.Unlock()
	if last {
		batch = append(batch, Entry{At: k.s.cfg.Now().UnixMilli(), Kind: KindEnd, Attempt: k.run.Attempt})
	}
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(k.base, 2*time.Second)
	defer cancel()
	err := k.s.cfg.Live.Append(ctx, k.run.JobID, batch)
	switch {
	case err != nil && !k.liveErr:
		k.liveErr = true
		k.log.Warn("transcript_live_failed", "err", err)
	case err == nil:
		k.liveErr = false
	}
}

// store writes the transcript file atomically.
func (k *keeper) store() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.tail != nil {
		note, _ := json.Marshal(Entry{At: k.s.cfg.Now().UnixMilli(), Kind: KindNote, Attempt: k.run.Attempt,
			Line: fmt.Sprintf("[transcript cut at %d bytes: %d lines left out, the last %d kept]", k.s.cfg.MaxBytes, k.dropped, len(k.tail))})
		_, _ = k.gz.Write(append(note, '\n'))
		for _, b := range k.tail {
			_, _ = k.gz.Write(b)
		}
	}
	if err := k.gz.Close(); err != nil {
		return err
	}
	if k.written == 0 && k.tail == nil {
		return nil // nothing printed, nothing to keep
	}
	return writeAtomic(k.s.cfg.Dir, FileName(k.run.JobID, k.run.Attempt), k.buf.Bytes())
}

// lineSplitter cuts output into redacted lines, each at most MaxLineBytes.
type lineSplitter struct {
	red  *Redactor
	buf  []byte
	skip bool // inside a line already cut: drop up to its newline
}

func (l *lineSplitter) write(p []byte) []string {
	var out []string
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		ended := i >= 0
		if !ended {
			i = len(p)
		}
		if !l.skip {
			l.buf = append(l.buf, p[:i]...)
		}
		p = p[min(i+1, len(p)):]
		switch {
		case l.skip:
			l.skip = !ended
		case len(l.buf) > MaxLineBytes:
			out = append(out, l.red.Cut(string(l.buf[:MaxLineBytes]))+" [line cut]")
			l.buf, l.skip = l.buf[:0], !ended
		case ended:
			out = append(out, l.red.Line(string(bytes.TrimSuffix(l.buf, []byte("\r")))))
			l.buf = l.buf[:0]
		}
	}
	return out
}

// flush returns a last unterminated line.
func (l *lineSplitter) flush() []string {
	if len(l.buf) == 0 {
		return nil
	}
	s := l.red.Line(string(l.buf))
	l.buf = nil
	return []string{s}
}

// Prune removes the stored transcripts last written before olderThan (see
// the package function Prune). The Worker's retention loop calls it with
// the run records' cutoff.
func (s *Store) Prune(olderThan time.Time) (int, error) {
	return Prune(s.cfg.Dir, olderThan)
}
