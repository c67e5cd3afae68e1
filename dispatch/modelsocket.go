package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// ModelSocketName is the socket's name in the folder mounted at
// /run/pidispatch: the container reaches its model at
// /run/pidispatch/model.sock.
const ModelSocketName = "model.sock"

// modelSocket is one job's model endpoint: a Unix socket in a folder of the
// job's own, whose HTTP requests are forwarded to the configured upstream.
// The container needs no network to reach it; the host end is the worker's.
type modelSocket struct {
	dir   string
	srv   *http.Server
	done  chan struct{}
	mu    sync.Mutex
	first time.Time
}

// newUpstreamProxy forwards every request to upstream unmetered, streaming
// (server-sent events are flushed as they arrive): the socket of a worker
// with PI_MODEL_UPSTREAM and no gateway.
func newUpstreamProxy(upstream string, log *slog.Logger) (http.Handler, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("model upstream: %w", err)
	}
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = u.Host
		},
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}, nil
}

// startModelSocket listens on <dir>/model.sock and serves handler there.
// The socket is world-connectable: the container's user is not the
// worker's, and the folder is visible to that one container only.
func startModelSocket(dir string, handler http.Handler, log *slog.Logger) (*modelSocket, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, ModelSocketName)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("model socket: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("model socket: %w", err)
	}
	m := &modelSocket{dir: dir, done: make(chan struct{})}
	m.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.mu.Lock()
			if m.first.IsZero() {
				m.first = time.Now()
			}
			m.mu.Unlock()
			handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 30 * time.Second,
	}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("model_socket_failed", "err", err)
		}
	}()
	return m, nil
}

// FirstRequest is when the container first asked for its model (zero when
// it never did).
func (m *modelSocket) FirstRequest() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.first
}

// Close ends open requests and stops serving; the socket file is removed.
func (m *modelSocket) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if m.srv.Shutdown(ctx) != nil {
		_ = m.srv.Close()
	}
	<-m.done
	_ = os.Remove(filepath.Join(m.dir, ModelSocketName))
}
