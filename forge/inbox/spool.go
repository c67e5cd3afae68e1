package inbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The spool is the inbox's local fallback: a folder holding the deliveries
// the receiver took while Valkey did not answer, one file each, moved to
// Valkey oldest first once it answers again.
//
// A file is written as .tmp-<name>, fsynced, renamed to <name> and the
// folder fsynced before the delivery is answered, so an answered delivery is
// on the disk. <name> is a 20-digit sequence number and .dlv: the order of
// receipt, across restarts. A .tmp- file is a write a crash cut short: it was
// never answered, is never read, and is removed at the next open. A file that
// does not read back whole (Decode: its length and digest) is removed and
// logged, never processed. One receiver holds a spool folder at a time (a
// lock on its .lock file).
const (
	spoolExt  = ".dlv"
	tmpPrefix = ".tmp-"
	lockName  = ".lock"
)

var spoolNameRE = regexp.MustCompile(`^([0-9]{20})\.dlv$`)

// ErrSpoolFull: the spool holds its byte bound.
var ErrSpoolFull = errors.New("spool full")

// errLocked: another process holds the spool folder.
var errLocked = errors.New("in use by another receiver")

// errInboxFull stops a drain while Valkey's inbox holds its bound.
var errInboxFull = errors.New("inbox full")

// Spool is a folder of deliveries waiting for Valkey. Safe for concurrent use.
type Spool struct {
	dir     string
	max     int64
	maxBody int64
	log     *slog.Logger
	lock    *os.File

	mu    sync.Mutex // the list below; one write at a time, in sequence order
	seq   uint64
	files []spoolFile
	ids   map[string]int

	nFiles, nBytes atomic.Int64
	drainMu        sync.Mutex
}

type spoolFile struct {
	name string
	size int64
	key  string // forge/key, "" when the file did not read
}

// idKey is what the spool tells deliveries apart by: the forge and the Key,
// so a body replayed under new ids takes no more room.
func idKey(d Delivery) string { return string(d.Forge) + "/" + d.Key() }

// OpenSpool opens (creating it, mode 0700) the spool folder dir, bounded to
// maxBytes of files, each delivery's body to maxBody. It takes the folder's
// lock, removes the .tmp- files a crash left, and lists the deliveries
// waiting, oldest first.
func OpenSpool(dir string, maxBytes, maxBody int64, log *slog.Logger) (*Spool, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	if err := lockFile(lock); err != nil {
		lock.Close()
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	s := &Spool{dir: dir, max: maxBytes, maxBody: maxBody, log: log, lock: lock, ids: map[string]int{}}
	if err := s.scan(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// scan lists the folder: .tmp- files are removed, <seq>.dlv files listed in
// sequence order, anything else left alone.
func (s *Spool) scan() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("spool %s: %w", s.dir, err)
	}
	partial := 0
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, tmpPrefix):
			if err := os.Remove(filepath.Join(s.dir, name)); err == nil {
				partial++
			}
		case e.Type().IsRegular() && spoolNameRE.MatchString(name):
			info, err := e.Info()
			if err != nil {
				continue
			}
			seq, _ := strconv.ParseUint(spoolNameRE.FindStringSubmatch(name)[1], 10, 64)
			s.seq = max(s.seq, seq)
			f := spoolFile{name: name, size: info.Size()}
			if d, err := s.read(filepath.Join(s.dir, name)); err == nil {
				f.key = idKey(d)
			}
			s.add(f)
		}
	}
	slices.SortFunc(s.files, func(a, b spoolFile) int { return strings.Compare(a.name, b.name) })
	if partial > 0 {
		s.log.Warn("receiver_spool_partial_removed", "dir", s.dir, "files", partial)
	}
	if len(s.files) > 0 {
		s.log.Info("receiver_spool_found", "dir", s.dir, "files", len(s.files), "bytes", s.nBytes.Load())
	}
	return nil
}

func (s *Spool) add(f spoolFile) {
	s.files = append(s.files, f)
	if f.key != "" {
		s.ids[f.key]++
	}
	s.nFiles.Add(1)
	s.nBytes.Add(f.size)
}

// drop forgets the list's first file, which the drain just handled.
func (s *Spool) drop(f spoolFile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.files) == 0 || s.files[0].name != f.name {
		return
	}
	s.files = s.files[1:]
	if f.key != "" {
		if s.ids[f.key]--; s.ids[f.key] <= 0 {
			delete(s.ids, f.key)
		}
	}
	s.nFiles.Add(-1)
	s.nBytes.Add(-f.size)
}

// Dir is the spool's folder.
func (s *Spool) Dir() string { return s.dir }

// Files and Bytes are what the spool holds now.
func (s *Spool) Files() int64 { return s.nFiles.Load() }

// Bytes is the size of the files the spool holds.
func (s *Spool) Bytes() int64 { return s.nBytes.Load() }

// Has reports whether a delivery of d's forge and body waits in the spool.
func (s *Spool) Has(d Delivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[idKey(d)] > 0
}

// Put writes d to the spool durably: written, fsynced, renamed, the folder
// fsynced. ErrSpoolFull: it would pass the byte bound. Any other error: the
// folder is not writable; nothing is kept.
func (s *Spool) Put(d Delivery) error {
	if err := d.check(s.maxBody); err != nil {
		return err
	}
	data := d.Encode()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nBytes.Load()+int64(len(data)) > s.max {
		return ErrSpoolFull
	}
	name := fmt.Sprintf("%020d%s", s.seq+1, spoolExt)
	tmp, final := filepath.Join(s.dir, tmpPrefix+name), filepath.Join(s.dir, name)
	if err := writeSynced(tmp, data); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := syncDir(s.dir); err != nil {
		// Not known to survive a crash: not kept, so not answered as kept.
		_ = os.Remove(final)
		return err
	}
	s.seq++
	s.add(spoolFile{name: name, size: int64(len(data)), key: idKey(d)})
	return nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Drain hands the spool's deliveries to put, oldest first, removing each
// file once put took it (stored, or a duplicate). It stops at the first
// error of put (Valkey still does not answer) or when the inbox is full, and
// returns how many it moved. A file that does not read back whole is removed
// and logged (receiver_spool_corrupt), never handed over.
func (s *Spool) Drain(ctx context.Context, put func(context.Context, Delivery) (Outcome, error)) (int, error) {
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	moved := 0
	for ctx.Err() == nil {
		s.mu.Lock()
		if len(s.files) == 0 {
			s.mu.Unlock()
			return moved, nil
		}
		f := s.files[0]
		s.mu.Unlock()
		path := filepath.Join(s.dir, f.name)
		d, err := s.read(path)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				s.log.Error("receiver_spool_corrupt", "file", f.name, "bytes", f.size, "err", err.Error())
				_ = os.Remove(path)
			}
			s.drop(f)
			continue
		}
		out, err := put(ctx, d)
		if err != nil {
			return moved, err
		}
		if out == Full {
			return moved, errInboxFull
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// Left on disk, it is moved again at the next open: a duplicate then.
			s.log.Error("receiver_spool_remove_failed", "file", f.name, "err", err.Error())
		}
		s.drop(f)
		moved++
	}
	return moved, ctx.Err()
}

// read reads and decodes one spool file, bounded in size.
func (s *Spool) read(path string) (Delivery, error) {
	f, err := os.Open(path)
	if err != nil {
		return Delivery{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxHeader+s.maxBody+1))
	if err != nil {
		return Delivery{}, err
	}
	return Decode(data, s.maxBody)
}

// Close releases the folder's lock. The files stay for the next open.
func (s *Spool) Close() {
	if s.lock != nil {
		unlockFile(s.lock)
		_ = s.lock.Close()
		s.lock = nil
	}
}
