package queuebench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoRedisServer means no redis-server binary is on PATH, so the bench
// cannot start its private server (give -valkey instead).
var ErrNoRedisServer = errors.New("queuebench: no redis-server on PATH")

const serverReadyTimeout = 10 * time.Second

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
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "no",
	)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
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
	if err := s.waitReady(ctx); err != nil {
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

func (s *Server) waitReady(ctx context.Context) error {
	c := redis.NewClient(&redis.Options{Addr: s.addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(serverReadyTimeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
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
			return fmt.Errorf("no answer within %s: %w", serverReadyTimeout, err)
		}
	}
}

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
