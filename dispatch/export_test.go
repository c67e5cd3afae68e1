package dispatch

import (
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
)

// ServeModelSocketForTest serves handler on a model socket made as the
// worker makes a job's, for a container running as user, and returns the
// socket's path.
func ServeModelSocketForTest(user string, handler http.Handler, conns int) (path string, stop func(), err error) {
	access := accessFor(user)
	dir, parent, private, err := modelSocketDir(access)
	if err != nil {
		return "", nil, err
	}
	m, err := startModelSocket(dir, private, access, handler, conns, slog.New(slog.DiscardHandler))
	if err != nil {
		_ = os.RemoveAll(parent)
		return "", nil, err
	}
	return filepath.Join(dir, ModelSocketName), func() { m.Close(); _ = os.RemoveAll(parent) }, nil
}
