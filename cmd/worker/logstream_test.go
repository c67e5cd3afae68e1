package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

// checkLogLine reports why line is not one JSON object whose every object
// has distinct keys, with a host.
func checkLogLine(line string) error {
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	keys, err := checkValue(dec)
	if err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON value on the line")
	}
	if keys == nil {
		return errors.New("not a JSON object")
	}
	if !keys["host"] {
		return errors.New("no host")
	}
	return nil
}

// checkValue reads one JSON value, failing on a duplicate key in any object;
// it returns the keys of the value when it is an object.
func checkValue(dec *json.Decoder) (map[string]bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		keys := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			name := k.(string)
			if keys[name] {
				return nil, fmt.Errorf("duplicate key %q", name)
			}
			keys[name] = true
			if _, err := checkValue(dec); err != nil {
				return nil, err
			}
		}
		_, err := dec.Token() // '}'
		return keys, err
	case json.Delim('['):
		for dec.More() {
			if _, err := checkValue(dec); err != nil {
				return nil, err
			}
		}
		_, err := dec.Token() // ']'
		return nil, err
	}
	return nil, nil
}

func TestCheckLogLine(t *testing.T) {
	for line, bad := range map[string]bool{
		`{"msg":"a","host":"h"}`:                   false,
		`{"msg":"a","host":"h","x":{"y":1}}`:       false,
		`{"msg":"a","host":"h","host":"h"}`:        true,
		`{"msg":"a","host":"h","x":{"y":1,"y":2}}`: true,
		`{"msg":"a"}`: true,
		`redis: 2026/12/01 connection pool: failed`: true,
	} {
		if err := checkLogLine(line); (err != nil) != bad {
			t.Errorf("%s: %v", line, err)
		}
	}
}

// assertCleanLog fails on every stderr line of a worker process that is not
// a JSON object with a host and distinct keys, and returns the messages.
func assertCleanLog(t *testing.T, logs string) map[string]int {
	t.Helper()
	msgs := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if err := checkLogLine(line); err != nil {
			t.Errorf("log line %v: %s", err, line)
			continue
		}
		var e struct{ Msg string }
		_ = json.Unmarshal([]byte(line), &e)
		msgs[e.Msg]++
	}
	return msgs
}

// Every line a worker process logs through boot, a job, a triggers file that
// stops parsing and shutdown is one JSON object with a host and no key twice.
func TestWorkerLogStreamIsCleanJSON(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	bin := workerBinary(t)
	db := livetest.Valkey(t)
	name := uniqueName("clean", db)
	logsDir := t.TempDir()
	triggers := filepath.Join(t.TempDir(), "triggers.json")
	if err := os.WriteFile(triggers, []byte(`{"triggers": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, bin, processEnv(map[string]string{
		"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*",
		"PI_WORKER_NAME":   name,
		"PI_JOB_IMAGE":     jobimage.TestTag,
		"PI_LOGS_DIR":      logsDir,
		"PI_JOB_MEMORY":    "256m",
		"PI_JOB_CPUS":      "0.5",
		"PI_TRIGGERS_FILE": triggers,
		"TMPDIR":           t.TempDir(),
	}))
	p.waitEvent(t, "worker_started", 30*time.Second)

	prod, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	e, err := prod.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_PRINT_EXIT_LINE=1"})
	if err != nil {
		t.Fatal(err)
	}
	waitRecord(t, logsDir, e.JobID, 60*time.Second)

	if err := os.WriteFile(triggers, []byte(`{"triggers": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	p.waitEvent(t, "schedules_reload_invalid", 20*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exit(t, 60*time.Second); code != exitOK {
		t.Fatalf("exit %d:\n%s", code, p.stderr.String())
	}
	msgs := assertCleanLog(t, p.stderr.String())
	for _, want := range []string{"worker_started", "schedules_installed", "schedules_reload_invalid", "worker_stopped"} {
		if msgs[want] == 0 {
			t.Errorf("no %s in the log:\n%s", want, p.stderr.String())
		}
	}
	if !strings.Contains(p.stderr.String(), `"version":"`) {
		t.Errorf("worker_started does not carry the version:\n%s", p.stderr.String())
	}
}

// A worker booted with Valkey and Docker both down says so in one line that
// names what is down and that jobs wait, and its log stays clean JSON: the
// Valkey client's own complaints included.
func TestBootWithServicesDownSaysSo(t *testing.T) {
	t.Parallel()
	bin := workerBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	p := startProcess(t, bin, processEnv(map[string]string{
		"VALKEY_URL": "redis://" + addr + "/0", "PI_UNSIGNED_QUEUES": "*",
		"DOCKER_HOST":    "unix://" + filepath.Join(t.TempDir(), "no-docker.sock"),
		"PI_WORKER_NAME": "down-test",
		"PI_LOGS_DIR":    t.TempDir(),
		"TMPDIR":         t.TempDir(),
	}))
	p.waitEvent(t, "worker_started", 60*time.Second)
	time.Sleep(3 * time.Second) // the fetch loop meets the dead Valkey
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.exit(t, 60*time.Second)
	logs := p.stderr.String()
	msgs := assertCleanLog(t, logs)
	if msgs["services_down"] != 1 {
		t.Fatalf("want one services_down line:\n%s", logs)
	}
	for line := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(line, `"msg":"services_down"`) {
			for _, want := range []string{"valkey", "docker", "jobs wait"} {
				if !bytes.Contains([]byte(line), []byte(want)) {
					t.Errorf("services_down does not say %q: %s", want, line)
				}
			}
		}
	}
}

// go-redis's messages become valkey_client lines; one kind repeats at most
// once a minute, saying how many were held back.
func TestRedisLogHoldsRepeats(t *testing.T) {
	var buf bytes.Buffer
	r := newRedisLog(slog.New(slog.NewJSONHandler(&buf, nil)).With("host", "h"))
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	for range 5 {
		r.Printf(context.Background(), "redis: connection pool: failed to dial: %v", "refused")
	}
	r.Printf(context.Background(), "redis: other %d", 1)
	now = now.Add(redisRepeat)
	r.Printf(context.Background(), "redis: connection pool: failed to dial: %v", "refused")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines:\n%s", buf.String())
	}
	for _, l := range lines {
		if err := checkLogLine(l); err != nil || !strings.Contains(l, `"msg":"valkey_client"`) {
			t.Errorf("%s: %v", l, err)
		}
	}
	if !strings.Contains(lines[0], `"detail":"connection pool: failed to dial: refused"`) || !strings.Contains(lines[2], `"repeats":4`) {
		t.Fatalf("lines:\n%s", buf.String())
	}
}
