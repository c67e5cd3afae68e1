package queuebench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"
)

// ErrNoRedisServer means no redis-server binary is on PATH, so the bench
// cannot start its private server (give -valkey instead).
var ErrNoRedisServer = errors.New("queuebench: no redis-server on PATH")

// DefaultReadyTimeout is how long StartServer waits for the server to
// answer PING.
const DefaultReadyTimeout = 10 * time.Second

// ServerOptions tune StartServerWith. The zero value is StartServer's.
type ServerOptions struct {
	// Wrapper, when set, is a command line that runs redis-server: the
	// server's path and arguments are appended to it (scriptcost runs the
	// server under valgrind this way). It runs in the server's directory.
	Wrapper []string
	// ReadyTimeout bounds the wait for the first PING. Default
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Args are added to the server's command line (fleetsim raises
	// --maxclients for its thousands of connections).
	Args []string
}

// Server is a private redis-server the bench starts for itself, so that no
// other client's traffic shares its single thread during a measurement. It
// has no persistence: snapshots (--save) and the append-only file are off.
type Server struct {
	addr   string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
	output *bytes.Buffer

	closeOnce sync.Once
}

// StartServer starts redis-server from PATH on a free loopback port and
// waits until it answers PING. Close stops it.
func StartServer(ctx context.Context) (*Server, error) {
	return StartServerWith(ctx, ServerOptions{})
}

// StartServerWith is StartServer with options.
func StartServerWith(ctx context.Context, opts ServerOptions) (*Server, error) {
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("pick a free port: %w", err)
	}
	dir, err := os.MkdirTemp("", "queuebench-redis-")
	if err != nil {
		return nil, err
	}
	out := &bytes.Buffer{}
	args := []string{bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "no",
	}
	args = append(args, opts.Args...)
	args = append(slices.Clone(opts.Wrapper), args...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	s := &Server{
		addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:    dir,
		cmd:    cmd,
		exited: make(chan struct{}),
		output: out,
	}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(ctx, opts.ReadyTimeout); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("redis-server on %s: %w\n%s", s.addr, err, out.String())
	}
	return s, nil
}

// freePort asks the kernel for an unused loopback port; redis-server binds
// it right after (a race with another process is reported by the start).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady waits until the server answers PING, for at most timeout.
func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := s.ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("exited before answering: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %s: %w", timeout, err)
		}
	}
}

// ping dials the server and sends one PING, without a client pool (whose
// failed dials would be logged while the server starts).
func (s *Server) ping(ctx context.Context) error {
	d := net.Dialer{Timeout: 200 * time.Millisecond}
	conn, err := d.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Pid is the process id of the server, or of its wrapper.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Dir is the server's working directory, removed by Close.
func (s *Server) Dir() string { return s.dir }

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// URL names the server's database 0.
func (s *Server) URL() string { return "redis://" + s.addr + "/0" }

// Close kills the server, waits for it to exit and removes its directory.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
		err = os.RemoveAll(s.dir)
	})
	return err
}
