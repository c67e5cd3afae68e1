package main

import (
	"context"
	"log/slog"
)

// startMetrics binds PI_METRICS_ADDR (when set) and serves the metrics,
// /healthz and /readyz until stop is called. It serves past the end of the
// run's ctx on purpose: a draining worker still answers scrapes (and
// /readyz says it no longer takes jobs). A port that cannot be bound is a
// *config.ConfigError: boot is refused before anything runs.
func startMetrics(ctx context.Context, s *stack, log *slog.Logger) (stop func(), err error) {
	srv, err := s.ListenMetrics()
	if err != nil || srv == nil {
		return func() {}, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(sctx); err != nil {
			log.Error("metrics_serve_failed", "addr", srv.Addr().String(), "err", err)
		}
	}()
	log.Info("metrics_serving", "addr", srv.Addr().String())
	return func() { cancel(); <-done }, nil
}
