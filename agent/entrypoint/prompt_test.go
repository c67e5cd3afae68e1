package entrypoint

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// bigPrompt is a Markdown prompt of about n bytes that starts the way an
// argument would have needed escaping for ("-" is a flag to pi's parser)
// and ends with a line a test can look for.
func bigPrompt(n int) string {
	var b strings.Builder
	b.WriteString("- first, read this as a prompt, not a flag\n@not-a-file\n\n# Instructions\n\n")
	for i := 0; b.Len() < n-64; i++ {
		b.WriteString("Line of the rendered prompt, number ")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(" é ✓\n")
	}
	b.WriteString("THE LAST LINE OF THE PROMPT\n")
	return b.String()
}

// writePrompt writes prompt.md into a new job folder and returns the folder.
func writePrompt(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prompt.md"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readStdin is what the fake pi read on its stdin.
func readStdin(t *testing.T, argvFile string) string {
	t.Helper()
	b, err := os.ReadFile(argvFile + ".stdin")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A flow job's prompt.md, 300 KiB (more than one argument may hold), is what
// pi reads on its stdin, whole and unescaped; no argument carries it; the
// transcript shows it quoted, before pi's own output, and says where it
// stopped showing it.
func TestMainGivesTheHostPromptOnStdin(t *testing.T) {
	prompt := bigPrompt(300 << 10)
	dir := writePrompt(t, prompt)
	pi, argvFile := fakePi(t, "pi-hello.jsonl", "exit")
	// A forge job's task may be empty: the prompt is the event's.
	r := runMainIn(t, dir, `{"jobId":"j","flow":"issue","task":""}`, pi, nil, Options{})
	if r.code != ExitCompleted {
		t.Fatalf("code %d, line %+v\n%s", r.code, r.line, r.stderr)
	}
	if got := readStdin(t, argvFile); got != prompt {
		t.Fatalf("pi's stdin: %d bytes, want the %d of prompt.md", len(got), len(prompt))
	}
	argv, _ := os.ReadFile(argvFile)
	if bytes.Contains(argv, []byte("Line of the rendered prompt")) || bytes.Contains(argv, []byte("first, read this")) {
		t.Fatalf("the prompt is on pi's command line:\n%s", argv)
	}
	header := "pi-entrypoint: the prompt (from " + filepath.Join(dir, "prompt.md") + ", " + strconv.Itoa(len(prompt)) + " bytes), given to pi on its standard input:\n" +
		"> - first, read this as a prompt, not a flag\n> @not-a-file\n> \n> # Instructions\n"
	i := strings.Index(r.stderr, header)
	if i < 0 {
		t.Fatalf("transcript does not show the prompt:\n%.2000s", r.stderr)
	}
	if j := strings.Index(r.stderr, "pi: pi says"); j < i {
		t.Fatalf("the prompt is not shown before pi's output (%d, %d)", i, j)
	}
	if strings.Contains(r.stderr, "THE LAST LINE") || !strings.Contains(r.stderr, "[the prompt goes on: ") {
		t.Fatalf("a prompt past PromptShownBytes is not cut in the transcript")
	}
	if n := len(r.stderr); n > 100<<10 {
		t.Fatalf("transcript of %d bytes", n)
	}
}

// A command job keeps its /name and task: prompt.md is not read, so not
// even an invalid one refuses it. With no prompt.md, a flow job's prompt is
// its task, on stdin.
func TestMainKeepsCommandAndTaskPrompts(t *testing.T) {
	dir := writePrompt(t, "\xff not UTF-8")
	pi, argvFile := fakePi(t, "pi-hello.jsonl", "exit")
	r := runMainIn(t, dir, `{"jobId":"j","command":"review","task":"the diff"}`, pi, nil, Options{})
	if r.code != ExitCompleted || readStdin(t, argvFile) != "/review the diff" {
		t.Fatalf("command job: code %d, stdin %q\n%s", r.code, readStdin(t, argvFile), r.stderr)
	}
	if !strings.Contains(r.stderr, "the prompt (from the command and the task, 16 bytes)") || !strings.Contains(r.stderr, "\n> /review the diff\n") {
		t.Fatalf("transcript:\n%s", r.stderr)
	}

	pi, argvFile = fakePi(t, "pi-hello.jsonl", "exit")
	r = runMain(t, `{"jobId":"j","task":"@write hello"}`, pi, nil, Options{})
	if r.code != ExitCompleted || readStdin(t, argvFile) != "@write hello" {
		t.Fatalf("task job: code %d, stdin %q\n%s", r.code, readStdin(t, argvFile), r.stderr)
	}
	if !strings.Contains(r.stderr, "the prompt (from the task, 12 bytes)") || !strings.Contains(r.stderr, "\n> @write hello\n") {
		t.Fatalf("transcript:\n%s", r.stderr)
	}
}

// A prompt.md that is a symbolic link to a file beside it is read.
func TestMainFollowsALinkInsideTheJobFolder(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rendered.md"), []byte("the linked prompt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("rendered.md", filepath.Join(dir, "prompt.md")); err != nil {
		t.Fatal(err)
	}
	pi, argvFile := fakePi(t, "pi-hello.jsonl", "exit")
	r := runMainIn(t, dir, `{"jobId":"j","task":"the task"}`, pi, nil, Options{})
	if r.code != ExitCompleted || readStdin(t, argvFile) != "the linked prompt\n" {
		t.Fatalf("code %d, stdin %q\n%s", r.code, readStdin(t, argvFile), r.stderr)
	}
}

// A prompt.md that is not the host's bounded Markdown, or that leads out
// of the job folder, refuses the job as a bad one (exit 2) before pi starts,
// and the transcript says why.
func TestMainRefusesABadPromptFile(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret.md")
	if err := os.WriteFile(outside, []byte("a file outside the job folder\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		make func(t *testing.T, path string)
		why  string
	}{
		"too large": {func(t *testing.T, p string) { write(t, p, strings.Repeat("a", MaxPromptBytes+1)) }, "larger than 1048576 bytes"},
		"not UTF-8": {func(t *testing.T, p string) { write(t, p, "caf\xe9\n") }, "not valid UTF-8"},
		"empty":     {func(t *testing.T, p string) { write(t, p, " \n\n") }, "the prompt is empty"},
		"a folder":  {func(t *testing.T, p string) { mkdir(t, p) }, "not a regular file"},
		"a FIFO":    {mkfifo, "not a regular file"},
		"a link out": {func(t *testing.T, p string) {
			rel, err := filepath.Rel(filepath.Dir(p), outside)
			if err != nil {
				t.Fatal(err)
			}
			symlink(t, rel, p)
		}, "escapes"},
		"an absolute link":    {func(t *testing.T, p string) { symlink(t, outside, p) }, "escapes"},
		"a link to /dev/zero": {func(t *testing.T, p string) { symlink(t, "/dev/zero", p) }, "escapes"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			tc.make(t, filepath.Join(dir, "prompt.md"))
			pi, argvFile := fakePi(t, "pi-hello.jsonl", "exit")
			r := runMainIn(t, dir, `{"jobId":"j","task":"the task"}`, pi, nil, Options{})
			if r.code != ExitPolicy || r.line.Outcome != OutcomePolicy || r.line.Reason != ReasonInvalidJob {
				t.Fatalf("code %d, line %+v\n%s", r.code, r.line, r.stderr)
			}
			if !strings.Contains(r.stderr, "prompt.md: the job cannot be run") || !strings.Contains(r.stderr, tc.why) {
				t.Fatalf("transcript does not say %q:\n%s", tc.why, r.stderr)
			}
			if strings.Contains(r.stderr, "outside the job folder") {
				t.Fatalf("the file outside was read:\n%s", r.stderr)
			}
			if _, err := os.Stat(argvFile); err == nil {
				t.Fatal("pi was started")
			}
		})
	}
}

// A job with nothing to ask (no task, no command, no prompt.md) is refused.
func TestLoadJobRefusesNothingToAsk(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job.json")
	write(t, job, `{"jobId":"a","task":"  "}`)
	_, err := LoadJob(job, filepath.Join(dir, "prompt.md"), func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "nothing to ask the agent") {
		t.Fatalf("err = %v", err)
	}
	write(t, filepath.Join(dir, "prompt.md"), "the host's prompt")
	j, err := LoadJob(job, filepath.Join(dir, "prompt.md"), func(string) string { return "" })
	if err != nil || j.Prompt() != "the host's prompt" {
		t.Fatalf("with prompt.md: %q, %v", j.Prompt(), err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}
