package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Timeouts of the HTTP server. readyTimeout bounds one /readyz check.
const (
	readyTimeout    = 2 * time.Second
	shutdownTimeout = 5 * time.Second
)

// ReadyFunc says whether the worker can take jobs: nil when it can, else
// the reason it cannot (Valkey unreachable, consumers not running).
type ReadyFunc func(ctx context.Context) error

// Handler serves /metrics from m's own registry, /healthz (200 for as long
// as the process serves) and /readyz (200 when ready returns nil, 503 with
// its error otherwise; a nil ready is always ready).
func Handler(m *Metrics, ready ReadyFunc) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry: m.reg, Timeout: 2 * m.timeout, ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			if err := ready(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready: %v\n", err)
				return
			}
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// ListenError is a metrics address that cannot be listened on (a bad host,
// a port in use).
type ListenError struct {
	Addr string
	Err  error
}

func (e *ListenError) Error() string { return fmt.Sprintf("metrics: listen on %s: %v", e.Addr, e.Err) }

func (e *ListenError) Unwrap() error { return e.Err }

// Server is the metrics HTTP server, listening from Listen on.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Listen binds addr (host:port) for m's handler. Binding apart from
// serving lets a caller refuse boot on a taken port before anything runs.
func Listen(addr string, m *Metrics, ready ReadyFunc) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &ListenError{Addr: addr, Err: err}
	}
	return &Server{ln: ln, srv: &http.Server{
		Handler:           Handler(m, ready),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       time.Minute,
	}}, nil
}

// Addr is the address the server listens on (the port chosen for ":0").
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until ctx ends, then shuts down (open scrapes get
// shutdownTimeout) and returns nil; it returns the server's error if it
// stops on its own. No goroutine outlives it.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		_ = s.srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Serve listens on addr and serves m until ctx ends: Listen then
// Server.Serve.
func Serve(ctx context.Context, addr string, m *Metrics, ready ReadyFunc) error {
	s, err := Listen(addr, m, ready)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}
