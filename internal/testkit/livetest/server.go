package livetest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// serverReadyTimeout bounds how long a freshly started redis-server may take to
// answer PING.
const serverReadyTimeout = 10 * time.Second

// Server is a private redis-server process owned by one test: a server the test
// may stop and start again (an outage, a restart under load), which the shared
// VALKEY_TEST_URL server must never be. It has no persistence, so a restart
// comes back empty.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	output  *bytes.Buffer
	clients []*redis.Client
}

// StartServer starts a redis-server from PATH on a free loopback port, waits until
// it answers, and stops it when the test ends. It skips (or fails, when
// PIDISPATCH_REQUIRE_LIVE=1) when no redis-server binary is installed.
func StartServer(t testing.TB) *Server {
	t.Helper()
	SkipShort(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server binary: %v", err)
		return nil
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), port: port}
	t.Cleanup(func() {
		s.mu.Lock()
		clients := s.clients
		s.clients = nil
		s.mu.Unlock()
		for _, c := range clients {
			_ = c.Close()
		}
		s.Stop()
	})
	s.Start()
	return s
}

// freePort asks the kernel for an unused loopback port. The listener is closed
// before redis-server binds it; another process could take the port in between,
// which the start then reports.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the server's database 0 as a redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Client returns a new client of the server's database 0, closed when the test
// ends. It keeps working across Stop and Start (commands fail while stopped).
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: time.Second})
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

// Start starts the server on its port if it is not running, and waits until it
// answers PING. StartServer has already called it once.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return
	}
	out := &bytes.Buffer{}
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--protected-mode", "no",
	)
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatalf("start redis-server: %v", err)
		return
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited, s.output = cmd, exited, out
	s.mu.Unlock()

	if err := s.waitReady(exited); err != nil {
		s.Stop()
		s.t.Fatalf("redis-server on port %d: %v\n%s", s.port, err, out.String())
	}
}

// waitReady polls PING until the server answers, the process exits, or the
// ready timeout passes.
func (s *Server) waitReady(exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(serverReadyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before answering: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %s: %w", serverReadyTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit. The Server keeps its port, so
// Start brings it back at the same address. Stopping a stopped server does
// nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd, s.exited = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}
