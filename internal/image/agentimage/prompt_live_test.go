package agentimage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/agent/entrypoint"
	"github.com/pidispatch/pidispatch/internal/image/agentimage"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/runner"
)

// TestAgentReadsTheHostPrompt runs the real pi in the offline image, under
// the runner's isolation (read-only /job, no network), on a flow job whose
// host wrote a 300 KiB /job/prompt.md: more than one command-line argument
// may hold (128 KiB on Linux), so it reaches pi only on its stdin. The
// recording fake provider, behind the job's model socket, must receive the
// prompt whole as the first request's user message, and the run's
// transcript must show it, marked as the prompt, before pi's answer.
func TestAgentReadsTheHostPrompt(t *testing.T) {
	c := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := agentimage.Ensure(ctx, c, agentimage.Tag, t.Logf); err != nil {
		t.Fatal(err)
	}
	socketDir, jobDir, ws := t.TempDir(), t.TempDir(), t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(socketDir, "model.sock"))
	if err != nil {
		t.Fatal(err)
	}
	fp := fakeprovider.Start(ln, fakeprovider.Answer("I read the whole prompt.", fakeprovider.Usage{Input: 80000, Output: 6}))
	defer fp.Close()

	prompt := hostPrompt(300 << 10)
	writeFile(t, filepath.Join(jobDir, "prompt.md"), prompt)
	// A forge job's task is empty: what it asks is in the prompt.
	writeFile(t, filepath.Join(jobDir, "job.json"), `{"jobId":"live-prompt","kind":"forge","flow":"default","task":"","model":"claude-haiku-4-5"}`)

	d, err := runner.NewDocker(c, runner.Config{})
	if err != nil {
		t.Fatal(err)
	}
	worker := fmt.Sprintf("agentimage-test-%d", time.Now().UnixNano())
	defer func() { _, _ = d.Reap(context.Background(), worker) }()
	spec := runner.Spec{
		JobID: "live-prompt", Worker: worker, Image: agentimage.Tag, Network: "none",
		JobDir: jobDir, WorkspaceDir: ws, ModelSocketDir: socketDir,
		// The owner of the folders, as the worker runs a folder job.
		User:       fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()),
		Env:        map[string]string{"PI_AGENT_RETRIES": "0"},
		OutputFile: filepath.Join(t.TempDir(), "output"),
		Timeout:    3 * time.Minute,
	}
	runCtx, cancelRun := context.WithTimeout(ctx, 4*time.Minute)
	defer cancelRun()
	res, err := d.Run(runCtx, spec)
	output, _ := os.ReadFile(spec.OutputFile)
	if err != nil || res.ExitCode != entrypoint.ExitCompleted {
		t.Fatalf("err %v, exit %d\n%s", err, res.ExitCode, tail(output))
	}

	reqs := fp.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the provider saw %d requests, want 1\n%s", len(reqs), tail(output))
	}
	got, err := firstUserText(reqs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	// pi trims the stdin it reads: the prompt's last newline goes.
	if want := strings.TrimSpace(prompt); got != want {
		t.Fatalf("the model was asked %d bytes (starting %.80q, ending %q), want the %d of prompt.md",
			len(got), got, got[max(0, len(got)-80):], len(want))
	}

	out := string(output)
	header := fmt.Sprintf("pi-entrypoint: the prompt (from %s, %d bytes), given to pi on its standard input:\n> -- %s\n",
		entrypoint.PromptFile, len(prompt), "a prompt may start like a flag")
	at := strings.Index(out, header)
	if at < 0 {
		t.Fatalf("the transcript does not show the prompt:\n%s", tail(output))
	}
	if answer := strings.Index(out, "assistant: I read the whole prompt."); answer < at {
		t.Fatalf("the transcript does not show the prompt before pi's answer (%d, %d)", at, answer)
	}
	if !strings.Contains(out, fmt.Sprintf("of its %d bytes shown here; pi was given all of it]", len(prompt))) {
		t.Fatalf("the transcript does not say the prompt was cut:\n%s", tail(output))
	}
}

// hostPrompt is a Markdown prompt of n bytes, as the host renders one: a
// first line an argument parser would take for a flag, then sections of
// quoted, non-ASCII text, then a line that ends it.
func hostPrompt(n int) string {
	var b strings.Builder
	b.WriteString("-- a prompt may start like a flag\n\n# Instructions\n\nFix the issue below.\n\n## The issue\n\n")
	for i := 0; b.Len() < n-100; i++ {
		fmt.Fprintf(&b, "> line %06d of the issue: ünïcödé, \"quotes\", `code`\n", i)
	}
	b.WriteString("The end of the prompt.\n")
	for b.Len() < n {
		b.WriteString("\n")
	}
	return b.String()
}

// firstUserText is the text of the first user message of an Anthropic
// Messages request, whose content is a string or a list of blocks.
func firstUserText(body []byte) (string, error) {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return "", fmt.Errorf("request body: %v", err)
	}
	for _, m := range req.Messages {
		if m.Role != "user" {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			return s, nil
		}
		var blocks []struct{ Type, Text string }
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return "", fmt.Errorf("user content: %v", err)
		}
		var text strings.Builder
		for _, bl := range blocks {
			if bl.Type == "text" {
				text.WriteString(bl.Text)
			}
		}
		return text.String(), nil
	}
	return "", fmt.Errorf("no user message in %d bytes", len(body))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tail is the end of a run's output, for a failure message.
func tail(output []byte) string {
	if i := len(output) - 8<<10; i > 0 {
		output = output[i:]
	}
	return string(bytes.ToValidUTF8(output, []byte("?")))
}
