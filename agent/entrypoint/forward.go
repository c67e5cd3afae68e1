package entrypoint

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// forwarder listens on container loopback and copies each connection to the
// model socket the worker mounted, so pi can reach its provider in a
// container with no network.
type forwarder struct {
	// ctx bounds the dials to the socket; Close cancels it.
	ctx    context.Context
	stop   context.CancelFunc
	ln     net.Listener
	socket string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// startForwarder listens on 127.0.0.1 (a free port) and forwards to socket
// until Close or the end of ctx stops new dials.
func startForwarder(ctx context.Context, socket string) (*forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	f := &forwarder{ctx: ctx, stop: stop, ln: ln, socket: socket, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// Addr is the loopback address pi connects to.
func (f *forwarder) Addr() string { return f.ln.Addr().String() }

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.pipe(c)
		}()
	}
}

func (f *forwarder) pipe(c net.Conn) {
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	up, err := (&net.Dialer{}).DialContext(ctx, "unix", f.socket)
	cancel()
	if err != nil {
		_ = c.Close()
		return
	}
	if !f.track(c, up) {
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); copyHalf(up, c) }()
	go func() { defer wg.Done(); copyHalf(c, up) }()
	wg.Wait()
	f.untrack(c, up)
}

// copyHalf copies one direction and passes the end of it on.
func copyHalf(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

func (f *forwarder) track(conns ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *forwarder) untrack(conns ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(f.conns, c)
	}
}

// Close stops listening, ends open connections and waits for every
// goroutine.
func (f *forwarder) Close() {
	_ = f.ln.Close()
	f.stop()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
