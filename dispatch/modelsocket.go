package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// ModelSockets opens a job's model socket: a Unix socket in a fresh folder
// of its own, serving handler, at most conns connections at once, that only
// a container running as user (the container.Spec form) may connect to.
// The folder is mounted at /run/pidispatch. socket.Open (package gateway/socket) implements it.
type ModelSockets interface {
	Open(handler http.Handler, user string, conns int, log *slog.Logger) (ModelSocket, error)
}

// ModelSocket is one job's open model socket.
type ModelSocket interface {
	// Dir is the folder to mount at /run/pidispatch.
	Dir() string
	// FirstRequest is when the container first asked for its model (zero
	// when it never did).
	FirstRequest() time.Time
	// Close stops serving and removes the folder.
	Close()
}

// modelEndpoint starts the job's model socket, and returns the folder to
// mount at /run/pidispatch: the gateway's session for the job when there is
// a gateway, else a plain forwarder to PI_MODEL_UPSTREAM, else no socket.
// The folder is a fresh one in TMPDIR, not in the job's folder: a socket's
// path is limited to 107 bytes, and a job folder's name holds the job id.
func (w *Worker) modelEndpoint(ctx context.Context, h *held, user string) (dir string, stop func(), err error) {
	var handler http.Handler
	switch {
	case w.gatewayOn():
		h.gw = w.deps.Gateway.Job(ctx, w.gatewayJob(h))
		handler = h.gw
	case w.cfg.ModelUpstream != "":
		if handler, err = newUpstreamProxy(w.cfg.ModelUpstream, h.log); err != nil {
			return "", nil, err
		}
	default:
		return "", func() {}, nil
	}
	m, err := w.deps.ModelSockets.Open(handler, user, w.cfg.Gateway.MaxConns, h.log)
	if err == nil {
		return m.Dir(), func() {
			m.Close()
			if h.gw != nil {
				h.gw.Close()
			}
			if first := m.FirstRequest(); !first.IsZero() {
				h.log.Info("model_first_request", "afterPickupMs", first.Sub(h.pickedUp).Milliseconds())
			}
		}, nil
	}
	if h.gw != nil {
		h.gw.Close()
		h.gw = nil
	}
	return "", nil, err
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
