// Package socket serves one job's model endpoint on a Unix socket in a
// fresh folder of its own, mounted into the job's container at
// /run/pidispatch: the container needs no network to reach its model, and no
// other local user may connect. The socket bounds the connections a job holds
// and the time a request's headers take.
package socket

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Name is the socket's name in the folder mounted at /run/pidispatch: the
// container reaches its model at /run/pidispatch/model.sock.
const Name = "model.sock"

// Socket is one job's model endpoint: a Unix socket in a folder of the job's
// own, serving a handler (the job's gateway session, or a forwarder). The
// host end is the worker's.
type Socket struct {
	dir    string
	parent string // removed on Close; "" when the caller made dir
	srv    *http.Server
	done   chan struct{}
	mu     sync.Mutex
	first  time.Time
}

// Open makes a fresh socket folder for a container running as user (the
// container.Spec form: "UID:GID", or "" for the image's own user) and serves
// handler on <dir>/model.sock, at most conns connections at once
// (DefaultConns when conns <= 0). Close stops it and removes the folder.
func Open(handler http.Handler, user string, conns int, log *slog.Logger) (*Socket, error) {
	access := accessFor(user)
	dir, parent, private, err := makeDir(access)
	if err != nil {
		if parent != "" {
			_ = os.RemoveAll(parent)
		}
		return nil, err
	}
	s, err := start(dir, private, access, handler, conns, log)
	if err != nil {
		_ = os.RemoveAll(parent)
		return nil, err
	}
	s.parent = parent
	return s, nil
}

// Dir is the folder to mount at /run/pidispatch.
func (m *Socket) Dir() string { return m.dir }

// Bounds of a job's model socket, beyond those of the gateway (calls in
// flight, body size and read time).
const (
	// DefaultConns is the default of PI_GATEWAY_MAX_CONNS: the
	// connections a job may hold open on its socket; more wait, unaccepted,
	// in the kernel's queue, so the worker's descriptors stay bounded.
	DefaultConns = 32
	// socketHeaderTimeout bounds reading a request's headers, from the
	// connection's accept or its last request.
	socketHeaderTimeout = 30 * time.Second
	// socketIdleTimeout closes a connection idle between requests.
	socketIdleTimeout = 90 * time.Second
)

// socketAccess is who may connect to a job's socket besides the worker:
// the container's user when it is known and the worker may give it the
// folder (UID and GID), else anyone who knows the folder's unguessable name.
type socketAccess struct {
	uid, gid int
	known    bool
}

// accessFor is the socket access of a container running as user (the
// container.Spec form: "UID:GID", or "" for the image's own user).
func accessFor(user string) socketAccess {
	u, g, ok := strings.Cut(user, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil {
		return socketAccess{}
	}
	return socketAccess{uid: uid, gid: gid, known: true}
}

// makeDir makes the folder mounted at /run/pidispatch, closed to
// every other local user: owned by the container's user, mode 0700, when
// that user is known and the worker may give it the folder; else a folder
// of a random name inside one only the worker may list (mode 0711). parent
// is what the caller removes; private is true for the first kind.
func makeDir(access socketAccess) (dir, parent string, private bool, err error) {
	parent, err = os.MkdirTemp("", "pim-")
	if err != nil {
		return "", "", false, err
	}
	if access.known && (access.uid == os.Getuid() || os.Lchown(parent, access.uid, access.gid) == nil) {
		return parent, parent, true, os.Chmod(parent, 0o700)
	}
	// 96 random bits in 16 characters.
	var name [12]byte
	_, _ = rand.Read(name[:])
	dir = filepath.Join(parent, base64.RawURLEncoding.EncodeToString(name[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", parent, false, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", parent, false, err
	}
	return dir, parent, false, os.Chmod(parent, 0o711)
}

// start listens on <dir>/model.sock and serves handler there,
// at most conns connections at once. In a private dir the socket is the
// container user's (mode 0600), else world-connectable inside dir's
// unguessable path.
func start(dir string, private bool, access socketAccess, handler http.Handler, conns int, log *slog.Logger) (*Socket, error) {
	path := filepath.Join(dir, Name)
	ln, err := listenUnix(dir)
	if err != nil {
		return nil, fmt.Errorf("model socket: %w", err)
	}
	mode := os.FileMode(0o666)
	if private {
		mode = 0o600
		if access.known && access.uid != os.Getuid() {
			err = os.Lchown(path, access.uid, access.gid)
		}
	}
	if err == nil {
		err = os.Chmod(path, mode)
	}
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("model socket: %w", err)
	}
	if conns <= 0 {
		conns = DefaultConns
	}
	m := &Socket{dir: dir, done: make(chan struct{})}
	m.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.mu.Lock()
			if m.first.IsZero() {
				m.first = time.Now()
			}
			m.mu.Unlock()
			handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: socketHeaderTimeout,
		IdleTimeout:       socketIdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	lln := &limitListener{Listener: ln, slots: make(chan struct{}, conns), closed: make(chan struct{})}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(lln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("model_socket_failed", "err", err)
		}
	}()
	return m, nil
}

// listenUnix listens on <dir>/model.sock. A socket's path is limited to
// 107 bytes and TMPDIR may be long, so on Linux it binds through the
// folder's descriptor (/proc/self/fd/N/model.sock), whatever the folder's
// path; elsewhere, or when that fails, by the path itself.
func listenUnix(dir string) (net.Listener, error) {
	path := filepath.Join(dir, Name)
	if len(path) < 100 {
		return net.Listen("unix", path)
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ln, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), Name))
	if err != nil {
		return net.Listen("unix", path)
	}
	// The descriptor's number names another file once d is closed: never
	// unlink by that name (the caller removes the folder).
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	return ln, nil
}

// limitListener accepts at most cap(slots) connections at once; the next
// waits in the kernel's queue until one closes.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

type slotConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// FirstRequest is when the container first asked for its model (zero when
// it never did).
func (m *Socket) FirstRequest() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.first
}

// Close ends open requests and stops serving; the socket file is removed,
// and the folder Open made.
func (m *Socket) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if m.srv.Shutdown(ctx) != nil {
		_ = m.srv.Close()
	}
	<-m.done
	_ = os.Remove(filepath.Join(m.dir, Name))
	if m.parent != "" {
		_ = os.RemoveAll(m.parent)
	}
}
