package dispatch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/pidispatch/pidispatch/internal/hostfolder"
	"github.com/pidispatch/pidispatch/internal/redact"
)

// Sessions: the agent's session of a thread (an issue, a pull request, a
// folder) is kept on the host between the thread's jobs, under the logs
// folder, never in the workspace: it is mounted at /session for the job,
// and taken back, its secrets redacted, when the job ends. A resume job's
// agent continues it.
const (
	// sessionsDir is the sessions' folder in PI_LOGS_DIR.
	sessionsDir = "sessions"
	// MaxSessionBytes bounds a thread's kept session; a larger one is not
	// kept (the next resume starts afresh), and said in the log. It bounds
	// a value in the fleet's session store too.
	MaxSessionBytes = 16 << 20
	// maxSessionFiles bounds the files of one session.
	maxSessionFiles = 64
)

// sessionKey names a thread's session folder: a digest, so no job data
// names a host path.
func sessionKey(thread string) string {
	sum := sha256.Sum256([]byte(thread))
	return hex.EncodeToString(sum[:8])
}

// threadSessionDir is where the thread's session is kept on this host.
func (w *Worker) threadSessionDir(thread string) string {
	return filepath.Join(w.cfg.LogsDir, sessionsDir, sessionKey(thread))
}

// prepareSession makes the job's session folder in base, for the container's
// user: a resume job's holds the thread's kept session, any other job's
// starts empty (its agent's new session is kept for the thread's next job).
// With the fleet's store, a resume job takes the thread's session from
// there when it is newer than the one this host kept.
// A job with no thread keeps no session.
func (w *Worker) prepareSession(ctx context.Context, h *held, base, user string) (string, error) {
	thread := h.spec.Thread()
	if thread == "" {
		return "", nil
	}
	dir := filepath.Join(base, "session")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	if h.spec.Resume && !w.restoreStoredSession(ctx, h, thread, w.threadSessionDir(thread), dir) {
		if err := copySession(w.threadSessionDir(thread), dir, nil); err != nil {
			h.log.Warn("session_restore_failed", "err", err)
		}
	}
	return dir, hostfolder.HandOver(dir, user)
}

// keepSession takes the job's session back as the thread's, its secrets
// redacted, replacing the one kept before. A session over MaxSessionBytes
// or maxSessionFiles, or one holding anything but regular files, is not
// kept.
func (w *Worker) keepSession(ctx context.Context, h *held, dir string) {
	thread := h.spec.Thread()
	if dir == "" || thread == "" {
		return
	}
	kept := w.threadSessionDir(thread)
	tmp := kept + ".tmp-" + fmt.Sprint(time.Now().UnixNano())
	if err := os.MkdirAll(filepath.Dir(kept), 0o700); err != nil {
		h.log.Warn("session_keep_failed", "err", err)
		return
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		h.log.Warn("session_keep_failed", "err", err)
		return
	}
	red := redact.New(secretValues(h.secrets))
	if err := copySession(dir, tmp, red); err != nil {
		_ = os.RemoveAll(tmp)
		h.log.Warn("session_not_kept", "reason", err.Error())
		return
	}
	_ = os.RemoveAll(kept)
	if err := os.Rename(tmp, kept); err != nil {
		_ = os.RemoveAll(tmp)
		h.log.Warn("session_keep_failed", "err", err)
		return
	}
	// The folder's time is when it was kept, by the Worker's clock: the
	// retention rules and the store's "newer" compare with it.
	keptAt := w.tune.Now()
	_ = os.Chtimes(kept, keptAt, keptAt)
	w.storeSession(ctx, h, thread, kept, keptAt)
}

// copySession copies the regular files of from (one level: pi keeps a
// session as files in its folder) into to, bounded, redacting each with red
// when given. A missing from copies nothing.
func copySession(from, to string, red *redact.Redactor) error {
	entries, err := os.ReadDir(from)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(entries) > maxSessionFiles {
		return fmt.Errorf("more than %d files", maxSessionFiles)
	}
	total := 0
	for _, e := range entries {
		if e.Type()&fs.ModeType != 0 {
			return fmt.Errorf("%s: not a regular file", e.Name())
		}
		n, err := copySessionFile(filepath.Join(from, e.Name()), filepath.Join(to, e.Name()), MaxSessionBytes-total, red)
		if err != nil {
			return err
		}
		total += n
	}
	return nil
}

// copySessionFile copies one file of at most limit bytes, without following
// a link (the job wrote the folder), redacted with red when given.
func copySessionFile(from, to string, limit int, red *redact.Redactor) (int, error) {
	fi, err := os.Lstat(from)
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%s: not a regular file", filepath.Base(from))
	}
	f, err := os.Open(from)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return 0, err
	}
	if len(data) > limit {
		return 0, fmt.Errorf("larger than %d bytes", MaxSessionBytes)
	}
	if red != nil {
		data = []byte(red.Line(string(data)))
	}
	return len(data), os.WriteFile(to, data, 0o600)
}

// secretValues are the job's secrets' values, for redaction.
func secretValues(secrets map[string]string) []string {
	out := make([]string, 0, len(secrets))
	for _, v := range secrets {
		out = append(out, v)
	}
	return out
}

// pruneSessions removes the threads' sessions last kept before cutoff.
func (w *Worker) pruneSessions(cutoff time.Time) (int, error) {
	root := filepath.Join(w.cfg.LogsDir, sessionsDir)
	entries, err := os.ReadDir(root)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !e.IsDir() || !fi.ModTime().Before(cutoff) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err == nil {
			n++
		}
	}
	return n, nil
}
