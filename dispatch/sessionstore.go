package dispatch

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
)

// The fleet's session store (Deps.Sessions, PI_SESSION_STORE=valkey): after
// a thread's session is kept on this host, redacted, it is also stored for
// the fleet, so a resume job on another host continues it. What comes back
// from the store is untrusted: anyone who can write Valkey can write it. It
// is read bounded, its signature checked when this host holds the fleet
// key, and its files checked by count, size and name before one is written.

var (
	// ErrNoSession: the store holds no session for the thread.
	ErrNoSession = errors.New("no session stored")
	// ErrSessionTooLarge: a stored value is over MaxSessionBytes.
	ErrSessionTooLarge = fmt.Errorf("stored session over %d bytes", MaxSessionBytes)
	// ErrSessionRefused wraps every reason a stored session is not used.
	ErrSessionRefused = errors.New("stored session refused")
)

const (
	// sessionMagic starts every stored value, with its signature ("-" when
	// the host that stored it holds no fleet key) on the same line.
	sessionMagic = "pisession1"
	// sessionStoreTimeout bounds one call to the store.
	sessionStoreTimeout = 10 * time.Second
	// maxSessionName bounds a session file's name.
	maxSessionName = 255
)

// storedSession is a session as the store keeps it, gzip-compressed JSON
// after the header line.
type storedSession struct {
	// Thread binds the value to its thread: one copied to another
	// thread's key is refused even unsigned.
	Thread string `json:"thread"`
	// KeptAt is when the session was kept, in Unix milliseconds: a host
	// holding a newer copy of its own keeps that one.
	KeptAt int64         `json:"keptAt"`
	Files  []sessionFile `json:"files"`
}

type sessionFile struct {
	Name string `json:"name"`
	Data []byte `json:"data"`
}

// sessionStream is what a stored session's signature is bound to.
func sessionStream(thread string) string { return "session:" + thread }

// encodeSession reads the kept session folder dir and returns the value to
// store, signed with key when it is set.
func encodeSession(dir, thread string, keptAt time.Time, key fleet.Key) ([]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	s := storedSession{Thread: thread, KeptAt: keptAt.UnixMilli()}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file", e.Name())
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		s.Files = append(s.Files, sessionFile{Name: e.Name(), Data: data})
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if err := json.NewEncoder(zw).Encode(s); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	sig := "-"
	if key.IsSet() {
		if sig, err = key.SignEntry(sessionStream(thread), sessionSigned(gz.Bytes())); err != nil {
			return nil, err
		}
	}
	value := append([]byte(sessionMagic+" "+sig+"\n"), gz.Bytes()...)
	if len(value) > MaxSessionBytes {
		return nil, ErrSessionTooLarge
	}
	return value, nil
}

// sessionSigned is what a stored session's signature covers: the digest of
// its compressed body.
func sessionSigned(body []byte) map[string]string {
	sum := sha256.Sum256(body)
	return map[string]string{"sha256": hex.EncodeToString(sum[:])}
}

// refused is a stored session's refusal, saying why.
func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrSessionRefused, fmt.Sprintf(format, args...))
}

// decodeSession checks a value read from the store for thread and returns
// its session. With key set, a value it did not sign is refused.
func decodeSession(value []byte, thread string, key fleet.Key) (storedSession, error) {
	if len(value) > MaxSessionBytes {
		return storedSession{}, refused("over %d bytes", MaxSessionBytes)
	}
	header, body, ok := bytes.Cut(value, []byte("\n"))
	if !ok || len(header) > 512 {
		return storedSession{}, refused("no header line")
	}
	magic, sig, ok := strings.Cut(string(header), " ")
	if !ok || magic != sessionMagic {
		return storedSession{}, refused("not a stored session")
	}
	if key.IsSet() {
		if sig == "-" {
			return storedSession{}, refused("unsigned, and this host holds the fleet key")
		}
		if !key.VerifyEntry(sessionStream(thread), sessionSigned(body), sig) {
			return storedSession{}, refused("its signature does not verify")
		}
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return storedSession{}, refused("not gzip: %v", err)
	}
	// JSON carries the files in base64: a third more, and a margin for the
	// names and fields.
	limit := int64(MaxSessionBytes)/3*4 + 64<<10
	raw, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil {
		return storedSession{}, refused("gzip: %v", err)
	}
	if int64(len(raw)) > limit {
		return storedSession{}, refused("expands past %d bytes", limit)
	}
	var s storedSession
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return storedSession{}, refused("not a session: %v", err)
	}
	if s.Thread != thread {
		return storedSession{}, refused("stored for another thread")
	}
	if len(s.Files) > maxSessionFiles {
		return storedSession{}, refused("more than %d files", maxSessionFiles)
	}
	total, names := 0, map[string]bool{}
	for _, f := range s.Files {
		if err := checkSessionName(f.Name); err != nil {
			return storedSession{}, refused("%v", err)
		}
		if names[f.Name] {
			return storedSession{}, refused("file %q twice", f.Name)
		}
		names[f.Name] = true
		if total += len(f.Data); total > MaxSessionBytes {
			return storedSession{}, refused("files over %d bytes", MaxSessionBytes)
		}
	}
	return s, nil
}

// checkSessionName allows a plain file name: no path separator, no ".." or
// ".", no control character.
func checkSessionName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("file name %q", name)
	case len(name) > maxSessionName:
		return fmt.Errorf("file name over %d bytes", maxSessionName)
	case strings.ContainsAny(name, `/\`):
		return fmt.Errorf("file name %q holds a path separator", name)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("file name %q holds a control character", name)
		}
	}
	return nil
}

// write puts the session's files in dir, a folder the Worker just made:
// each created new (O_EXCL: never through a link).
func (s storedSession) write(dir string) error {
	for _, f := range s.Files {
		fh, err := os.OpenFile(filepath.Join(dir, f.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = fh.Write(f.Data)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// restoreStoredSession fills dir, the resume job's fresh session folder,
// from the fleet's store when it holds a session of the thread newer than
// the one this host kept in local. It reports whether it did; anything it
// refuses is logged, and dir is left empty.
func (w *Worker) restoreStoredSession(ctx context.Context, h *held, thread, local, dir string) bool {
	if w.deps.Sessions == nil {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, sessionStoreTimeout)
	defer cancel()
	value, err := w.deps.Sessions.GetSession(cctx, thread)
	switch {
	case errors.Is(err, ErrNoSession):
		return false
	case errors.Is(err, ErrSessionTooLarge):
		h.log.Warn("session_store_refused", "reason", err.Error())
		return false
	case err != nil:
		h.log.Warn("session_store_unreadable", "err", err)
		return false
	}
	s, err := decodeSession(value, thread, w.cfg.FleetKey)
	if err != nil {
		h.log.Warn("session_store_refused", "reason", err.Error())
		return false
	}
	if fi, err := os.Stat(local); err == nil && !time.UnixMilli(s.KeptAt).After(fi.ModTime()) {
		return false // this host's own copy is as new
	}
	if err := s.write(dir); err != nil {
		h.log.Warn("session_store_refused", "reason", err.Error())
		emptyDir(dir)
		return false
	}
	h.log.Info("session_restored", "from", "store", "files", len(s.Files))
	return true
}

// emptyDir removes what dir holds, keeping dir.
func emptyDir(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// storeSession stores the session kept in kept (already redacted) for the
// fleet, expiring with the run records (PI_LOG_RETENTION_DAYS). A failure
// is logged: the session stays kept on this host.
func (w *Worker) storeSession(ctx context.Context, h *held, thread, kept string, keptAt time.Time) {
	if w.deps.Sessions == nil {
		return
	}
	value, err := encodeSession(kept, thread, keptAt, w.cfg.FleetKey)
	if err != nil {
		h.log.Warn("session_store_skipped", "reason", err.Error())
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionStoreTimeout)
	defer cancel()
	ttl := time.Duration(max(w.cfg.LogRetentionDays, 1)) * 24 * time.Hour
	if err := w.deps.Sessions.PutSession(cctx, thread, value, ttl); err != nil {
		h.log.Warn("session_store_failed", "err", err)
		return
	}
	h.log.Info("session_stored", "bytes", len(value))
}
