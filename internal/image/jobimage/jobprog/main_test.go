package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func runWith(t *testing.T, vars map[string]string, p paths) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ignored := false
	code = run(env(vars), &out, &errOut, p, func() { ignored = true })
	if vars["JOB_IGNORE_TERM"] == "1" && !ignored {
		t.Fatal("JOB_IGNORE_TERM=1 did not ignore SIGTERM")
	}
	return code, out.String(), errOut.String()
}

func TestDefaultBehaviour(t *testing.T) {
	dir := t.TempDir()
	jobFile := filepath.Join(dir, "job.json")
	if err := os.WriteFile(jobFile, []byte(`{"jobId":"j1"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runWith(t, nil, paths{jobFile: jobFile, workspace: dir})
	if code != 0 {
		t.Fatalf("code %d", code)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want := []string{"hello from the pidispatch test job", `job.json (15 bytes): {"jobId":"j1"}`, zeroLine}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Fatalf("stdout lines\n got %q\nwant %q", lines, want)
	}
	if !strings.Contains(errOut, "stderr") {
		t.Fatalf("stderr %q", errOut)
	}
}

func TestKnobs(t *testing.T) {
	dir := t.TempDir()
	vars := map[string]string{
		"JOB_STDOUT_BYTES":    "1000",
		"JOB_CHECK_ENV":       "SECRET_TOKEN",
		"SECRET_TOKEN":        "s3cr3t-value",
		"JOB_WRITE_FILE":      "../../etc/out.txt",
		"JOB_IGNORE_TERM":     "1",
		"JOB_SLEEP":           "1ms",
		"JOB_PRINT_EXIT_LINE": "1",
		"JOB_GLUE":            "1",
		"JOB_EXIT_CODE":       "2",
	}
	code, out, _ := runWith(t, vars, paths{jobFile: filepath.Join(dir, "absent"), workspace: dir})
	if code != 2 {
		t.Fatalf("code %d", code)
	}
	if !strings.HasPrefix(out, fillerLine[:40]) || strings.Index(out, "hello") != 1000 {
		t.Fatalf("filler is not exactly 1000 bytes before hello: index %d", strings.Index(out, "hello"))
	}
	if !strings.Contains(out, "env SECRET_TOKEN present\n") || strings.Contains(out, "s3cr3t") {
		t.Fatalf("env check output wrong: %q", out)
	}
	wantExit := `{"event":"exit","turns":3,"tokens":1234,"cost":0.05,"checkedEnv":{"SECRET_TOKEN":"present"}}`
	if !strings.HasSuffix(out, "text without a newline"+wantExit+"\n") {
		t.Fatalf("glued exit line with the env check missing: %q", out[len(out)-120:])
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || len(b) == 0 {
		t.Fatalf("workspace file (confined to the folder): %v", err)
	}

	_, out, _ = runWith(t, map[string]string{"JOB_CHECK_ENV": "NOPE", "JOB_PRINT_EXIT_LINE": "0"}, paths{workspace: dir})
	if !strings.Contains(out, "env NOPE absent") || strings.Contains(out, `"event"`) {
		t.Fatalf("absent env / no exit line: %q", out)
	}

	// The default exit line carries the check too, and stays valid JSON.
	_, out, _ = runWith(t, map[string]string{"JOB_CHECK_ENV": "NOPE"}, paths{workspace: dir})
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	last := lines[len(lines)-1]
	var exit struct {
		Event      string            `json:"event"`
		CheckedEnv map[string]string `json:"checkedEnv"`
	}
	if err := json.Unmarshal([]byte(last), &exit); err != nil || exit.Event != "exit" || len(exit.CheckedEnv) != 1 || exit.CheckedEnv["NOPE"] != "absent" {
		t.Fatalf("exit line %q: %+v (%v)", last, exit, err)
	}
	// Without the check the exit line is unchanged.
	_, out, _ = runWith(t, map[string]string{"JOB_PRINT_EXIT_LINE": "1"}, paths{workspace: dir})
	if !strings.HasSuffix(out, "\n"+telemetryLine+"\n") || strings.Contains(out, "checkedEnv") {
		t.Fatalf("exit line without a check: %q", out)
	}
}

func TestBadValuesExit1(t *testing.T) {
	for _, vars := range []map[string]string{
		{"JOB_EXIT_CODE": "x"}, {"JOB_EXIT_CODE": "256"}, {"JOB_SLEEP": "soon"}, {"JOB_STDOUT_BYTES": "-1"},
	} {
		if code, _, _ := runWith(t, vars, paths{}); code != 1 {
			t.Errorf("%v: code %d, want 1", vars, code)
		}
	}
}

// The job's task may carry JOB_* settings, so a job run by the real worker
// can be told to fail or sleep; the environment still wins, and the env check
// never counts a directive as a present variable.
func TestTaskDirectives(t *testing.T) {
	dir := t.TempDir()
	jobFile := filepath.Join(dir, "job.json")
	task := "do the thing\nJOB_EXIT_CODE=2\nJOB_PRINT_EXIT_LINE=1\nJOB_CHECK_ENV=SECRET_TOKEN\nSECRET_TOKEN=x\n"
	data := `{"jobId":"j1","task":` + strconvQuote(task) + `}`
	if err := os.WriteFile(jobFile, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runWith(t, nil, paths{jobFile: jobFile, workspace: dir})
	if code != 2 {
		t.Fatalf("code %d, want 2 from the task directive", code)
	}
	if !strings.Contains(out, strings.TrimSuffix(telemetryLine, "}")+`,"checkedEnv":{"SECRET_TOKEN":"absent"}}`) || !strings.Contains(out, "env SECRET_TOKEN absent") {
		t.Fatalf("stdout %q", out)
	}
	code, _, _ = runWith(t, map[string]string{"JOB_EXIT_CODE": "0"}, paths{jobFile: jobFile, workspace: dir})
	if code != 0 {
		t.Fatalf("environment must win over the task: code %d", code)
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The JOB_OUT_* directives leave files in the output folder, as a job (a
// hostile one too) leaves them for the host: a text, filler of an exact
// size, a link, a review with many inline comments; names are confined to
// the folder. JOB_WAIT_FILE waits for a file someone else makes.
func TestOutputDirectives(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	vars := map[string]string{
		"JOB_OUT_TEXT":   "../comment.md:hello there",
		"JOB_OUT_BYTES":  "big.md:100000",
		"JOB_OUT_LINK":   "pr.md:/etc/passwd",
		"JOB_OUT_REVIEW": "3",
	}
	code, stdout, stderr := runWith(t, vars, paths{workspace: dir, out: out})
	if code != 0 {
		t.Fatalf("code %d: %s %s", code, stdout, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(out, "comment.md")); err != nil || string(b) != "hello there\n" {
		t.Fatalf("comment.md: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(out, "big.md")); err != nil || fi.Size() != 100000 {
		t.Fatalf("big.md: %v %v", fi, err)
	}
	if dest, err := os.Readlink(filepath.Join(out, "pr.md")); err != nil || dest != "/etc/passwd" {
		t.Fatalf("pr.md link: %q %v", dest, err)
	}
	var review struct {
		Body     string `json:"body"`
		Comments []struct {
			Path string `json:"path"`
			Line int    `json:"line"`
			Body string `json:"body"`
		} `json:"comments"`
	}
	b, err := os.ReadFile(filepath.Join(out, "review.json"))
	if err != nil || json.Unmarshal(b, &review) != nil || len(review.Comments) != 3 || review.Comments[2].Body != "inline comment 3" {
		t.Fatalf("review.json: %s %v", b, err)
	}

	for _, bad := range []map[string]string{
		{"JOB_OUT_TEXT": "no-colon"}, {"JOB_OUT_BYTES": "big.md:lots"}, {"JOB_OUT_REVIEW": "-1"},
	} {
		if code, _, _ := runWith(t, bad, paths{workspace: dir, out: out}); code != 1 {
			t.Errorf("%v: code %d, want 1", bad, code)
		}
	}

	ready := filepath.Join(out, "ready")
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = os.WriteFile(ready, nil, 0o600)
	}()
	if code, stdout, _ := runWith(t, map[string]string{"JOB_WAIT_FILE": ready}, paths{workspace: dir, out: out}); code != 0 || !strings.Contains(stdout, "found "+ready) {
		t.Fatalf("wait: code %d, %q", code, stdout)
	}
	waitFileLimit = 10 * time.Millisecond
	t.Cleanup(func() { waitFileLimit = 5 * time.Minute })
	if code, _, _ := runWith(t, map[string]string{"JOB_WAIT_FILE": filepath.Join(out, "never")}, paths{workspace: dir, out: out}); code != 1 {
		t.Fatalf("a file that never appears: code %d, want 1", code)
	}
}
