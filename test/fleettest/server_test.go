package fleettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisDatabases is how many logical databases the suite's server has: one
// per scenario, numbered from 1.
const redisDatabases = 64

// redisServer is a private redis-server process. livetest.StartServer needs a
// testing.TB and has no persistence; the suite needs one server for its whole
// life (started from TestMain) and, for the restart scenario, one whose data
// survives a restart as a real deployment's does (append-only file, fsync on
// every write).
type redisServer struct {
	bin  string
	dir  string
	port int
	aof  bool
	args []string // further redis-server arguments (--replicaof ...)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// startRedis starts a redis-server on a free loopback port with its files in
// dir, and waits until it answers.
func startRedis(dir string, aof bool, args ...string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server binary: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pick a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &redisServer{bin: bin, dir: dir, port: port, aof: aof, args: args}
	return s, s.start()
}

func (s *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// url names database db of the server.
func (s *redisServer) url(db int) string { return "redis://" + s.addr() + "/" + strconv.Itoa(db) }

// client is a client of database db, for the test's own reads and enqueues.
func (s *redisServer) client(db int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.addr(), DB: db, DialTimeout: 2 * time.Second})
}

// start starts the server on its port (again, after stop) and waits until it
// answers PING. With aof, the append-only file in dir is replayed first.
func (s *redisServer) start() error {
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return nil
	}
	appendonly := "no"
	if s.aof {
		appendonly = "yes"
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	args := append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--databases", strconv.Itoa(redisDatabases),
		"--save", "",
		"--appendonly", appendonly,
		"--appendfsync", "always",
		"--dir", s.dir,
		"--daemonize", "no",
		"--protected-mode", "no",
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.mu.Unlock()
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	c := redis.NewClient(&redis.Options{Addr: s.addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited before answering (see %s/redis.log): %w", s.port, s.dir, err)
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("redis-server on port %d did not answer: %w", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the server with SIGTERM (it flushes its append-only file and
// exits), or SIGKILL after 10 s, and waits for it. The port is kept, so start
// brings it back at the same address.
func (s *redisServer) stop() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd, s.exited = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("redis-server on port %d ignored SIGTERM for 10 s; killed", s.port)
	}
}
