package transcript_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/observe/transcript"
)

type sink struct {
	mu  sync.Mutex
	got []transcript.Entry
}

func (s *sink) Append(_ context.Context, _ string, es []transcript.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, es...)
	return nil
}

func (s *sink) entries() []transcript.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]transcript.Entry(nil), s.got...)
}

func newStore(t *testing.T, max int, live transcript.Sink) (*transcript.Store, string) {
	dir := t.TempDir()
	s, err := transcript.NewStore(transcript.Config{Dir: dir, MaxBytes: max, Live: live, Poll: 10 * time.Millisecond})
	require.NoError(t, err)
	return s, dir
}

// Every secret value, as printed and JSON-escaped, is gone from the stored
// transcript and from the live stream; the rest of the line stays.
func TestSecretsAreRedactedEverywhere(t *testing.T) {
	live := &sink{}
	s, dir := newStore(t, 0, live)
	out := filepath.Join(t.TempDir(), "output.log")
	secret, quoted := "tok-9f8e7d6c5b4a", `pa"ss\word-42`
	k := s.Keep(context.Background(), dispatch.TranscriptRun{JobID: "job:1", Attempt: 2, OutputFile: out, Redact: []string{secret, quoted, ""}})
	f, err := os.Create(out)
	require.NoError(t, err)
	_, _ = f.WriteString("the key is " + secret + " ok\n")
	time.Sleep(50 * time.Millisecond)
	_, _ = f.WriteString(`{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"pw pa\"ss\\word-42"}]}}` + "\n")
	_, _ = f.WriteString("half a line " + secret[:5])
	_, _ = f.WriteString(secret[5:] + " end") // unterminated last line
	require.NoError(t, f.Close())
	s.ModelCall("job:1", 2, transcript.Call{Provider: "anthropic", Model: "m", Status: 200, Input: 10, Output: 5, Micros: 1234}, time.Now())
	require.NoError(t, k.Close())

	entries, err := transcript.Read(dir, "job:1", 2)
	require.NoError(t, err)
	var all strings.Builder
	for _, e := range entries {
		all.WriteString(e.Line + "\n")
	}
	raw, _ := os.ReadFile(filepath.Join(dir, transcript.FileName("job:1", 2)))
	for _, text := range []string{all.String(), string(raw)} {
		require.NotContains(t, text, secret)
		require.NotContains(t, text, "ss\\\\word")
	}
	require.Contains(t, all.String(), "the key is [redacted] ok")
	require.Contains(t, all.String(), "half a line [redacted] end")
	require.Equal(t, []int{2}, must(transcript.Attempts(dir, "job:1")))
	for _, e := range live.entries() {
		require.NotContains(t, e.Line, secret)
	}
	require.Equal(t, transcript.KindEnd, live.entries()[len(live.entries())-1].Kind)

	var buf bytes.Buffer
	sum := transcript.Render(&buf, entries)
	require.Equal(t, 1, sum.ModelCalls)
	require.EqualValues(t, 1234, sum.ModelMicros)
	require.Contains(t, buf.String(), "assistant: pw [redacted]")
	require.Contains(t, buf.String(), "model anthropic/m 200")
}

// A line longer than MaxLineBytes is cut, and a secret that straddles the
// cut leaves no part of itself behind.
func TestLongLineCutLeavesNoSecretPrefix(t *testing.T) {
	s, dir := newStore(t, 0, nil)
	out := filepath.Join(t.TempDir(), "output.log")
	secret := "SECRETVALUE-0123456789"
	line := strings.Repeat("a", transcript.MaxLineBytes-8) + secret + strings.Repeat("b", 100) + "\nnext\n"
	require.NoError(t, os.WriteFile(out, []byte(line), 0o600))
	k := s.Keep(context.Background(), dispatch.TranscriptRun{JobID: "j", Attempt: 1, OutputFile: out, Redact: []string{secret}})
	require.NoError(t, k.Close())
	entries, err := transcript.Read(dir, "j", 1)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.True(t, strings.HasSuffix(entries[0].Line, "[line cut]"))
	require.NotContains(t, entries[0].Line, "SECRET")
	require.Equal(t, "next", entries[1].Line)
}

// Past MaxBytes the head is kept, a note says what was left out, and the
// end of the output is kept too.
func TestSizeCapKeepsHeadAndTail(t *testing.T) {
	s, dir := newStore(t, 64<<10, nil)
	out := filepath.Join(t.TempDir(), "output.log")
	var b strings.Builder
	for i := range 100_000 {
		b.WriteString("line ")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString("\n")
	}
	b.WriteString("THE LAST LINE\n")
	require.NoError(t, os.WriteFile(out, []byte(b.String()), 0o600))
	k := s.Keep(context.Background(), dispatch.TranscriptRun{JobID: "j", Attempt: 1, OutputFile: out})
	require.NoError(t, k.Close())
	fi, err := os.Stat(filepath.Join(dir, transcript.FileName("j", 1)))
	require.NoError(t, err)
	require.Less(t, fi.Size(), int64(64<<10+300<<10))
	entries, err := transcript.Read(dir, "j", 1)
	require.NoError(t, err)
	require.Equal(t, "THE LAST LINE", entries[len(entries)-1].Line)
	var notes int
	for _, e := range entries {
		if e.Kind == transcript.KindNote {
			notes++
			require.Contains(t, e.Line, "lines left out")
		}
	}
	require.Equal(t, 1, notes)
}

// What a job prints cannot steer the reader's terminal.
func TestRenderEscapesControlCharacters(t *testing.T) {
	var buf bytes.Buffer
	transcript.Render(&buf, []transcript.Entry{{Kind: transcript.KindOut, Line: "a\x1b]0;pwned\x07b\u202e"}})
	require.NotContains(t, buf.String(), "\x1b")
	require.Contains(t, buf.String(), `a\x1b]0;pwned\x07b\x202e`)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The Worker's retention loop prunes the store with the run records.
var _ dispatch.Pruner = (*transcript.Store)(nil)
