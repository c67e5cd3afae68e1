package entrypoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// providerKeys names the environment variable pi reads a provider's key
// from, for the providers a placeholder key is set for when the model
// endpoint is the worker's socket (whose host side holds the credentials).
var providerKeys = map[string]string{
	"anthropic":  "ANTHROPIC_API_KEY",
	"openai":     "OPENAI_API_KEY",
	"google":     "GEMINI_API_KEY",
	"openrouter": "OPENROUTER_API_KEY",
}

// PlaceholderKey is the key pi is given when the model endpoint is the
// worker's socket and the job brought no key of its own.
const PlaceholderKey = "pidispatch-model-socket"

// prepareAgent writes pi's agent folder (settings.json, and models.json when
// the model endpoint is overridden) and returns pi's environment and the
// function that stops the socket forwarder.
func prepareAgent(ctx context.Context, o Options, job Job, dir string) (env []string, stop func(), err error) {
	stop = func() {}
	retries, delay := 2, 2000
	if v := o.Getenv("PI_AGENT_RETRIES"); v != "" {
		if retries, err = strconv.Atoi(v); err != nil || retries < 0 {
			return nil, stop, fmt.Errorf("PI_AGENT_RETRIES must be a whole number of at least 0")
		}
	}
	if v := o.Getenv("PI_AGENT_RETRY_DELAY_MS"); v != "" {
		if delay, err = strconv.Atoi(v); err != nil || delay < 1 {
			return nil, stop, fmt.Errorf("PI_AGENT_RETRY_DELAY_MS must be a whole number of at least 1")
		}
	}
	settings := map[string]any{
		"enableInstallTelemetry": false,
		// No cache-warming requests: every request pi makes is an answer
		// the run asked for or a compaction, and shows in the event stream.
		"cacheWarming": "off",
		// pi's own retries are the only ones: the provider SDK's silent
		// retries are off, so every retry shows in the event stream.
		"retry": map[string]any{"enabled": retries > 0, "maxRetries": retries, "baseDelayMs": delay,
			"provider": map[string]any{"maxRetries": 0}},
	}
	if err := writeJSON(dir+"/settings.json", settings); err != nil {
		return nil, stop, err
	}
	baseURL := o.Getenv("PI_AGENT_BASE_URL")
	if fi, serr := os.Stat(o.ModelSocket); serr == nil && fi.Mode()&os.ModeSocket != 0 {
		f, err := startForwarder(ctx, o.ModelSocket)
		if err != nil {
			return nil, stop, fmt.Errorf("model socket forwarder: %w", err)
		}
		stop = f.Close
		// The gateway on the socket reads the provider from the path.
		baseURL = "http://" + f.Addr() + "/" + job.Provider
	}
	env = piEnv(o.Environ(), dir)
	if baseURL != "" {
		models := map[string]any{"providers": map[string]any{job.Provider: map[string]any{"baseUrl": baseURL}}}
		if err := writeJSON(dir+"/models.json", models); err != nil {
			stop()
			return nil, func() {}, err
		}
		if k, ok := providerKeys[job.Provider]; ok && o.Getenv(k) == "" {
			env = append(env, k+"="+PlaceholderKey)
		}
	}
	return env, stop, nil
}

// piEnv is pi's environment: the container's, with pi's agent folder and
// every startup network call (update checks, telemetry) turned off. HOME is
// the agent folder too: the container's root file system is read-only, so
// the image's home cannot be written, and the folder lies on the /tmp tmpfs.
func piEnv(environ []string, dir string) []string {
	fixed := map[string]string{
		"HOME":                  dir,
		"PI_CODING_AGENT_DIR":   dir,
		"PI_OFFLINE":            "1",
		"PI_TELEMETRY":          "0",
		"PI_SKIP_VERSION_CHECK": "1",
	}
	var env []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := fixed[k]; !ok {
			env = append(env, kv)
		}
	}
	keys := make([]string, 0, len(fixed))
	for k := range fixed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+fixed[k])
	}
	return env
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o600)
}

var secretName = regexp.MustCompile(`(?i)(key|token|secret|passw|credential|auth|cookie|session)`)

// secretValues are the values of environment variables whose names look
// like credentials, longest first, for the transcript to redact.
func secretValues(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if len(v) >= 6 && secretName.MatchString(k) {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// transcript is the bounded, redacted writer of the readable run log.
type transcript struct {
	mu      sync.Mutex
	w       io.Writer
	left    int
	secrets []string
	cut     bool
}

func newTranscript(w io.Writer, limit int, secrets []string) *transcript {
	return &transcript{w: w, left: limit, secrets: secrets}
}

// Write redacts and writes p, or drops it once the limit is spent (the
// final summary line is always written). It never fails.
func (t *transcript) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	for _, s := range t.secrets {
		p = bytes.ReplaceAll(p, []byte(s), []byte("[redacted]"))
	}
	summary := bytes.HasPrefix(p, []byte("[run "))
	switch {
	case len(p) <= t.left || summary:
		_, _ = t.w.Write(p)
		t.left -= min(len(p), t.left)
	case !t.cut:
		t.cut = true
		_, _ = fmt.Fprintln(t.w, "[transcript truncated]")
	}
	return n, nil
}

// lineWriter passes pi's own stderr on to the transcript a line at a time,
// so redaction sees whole lines. Flush writes a last unterminated line.
type lineWriter struct {
	w   io.Writer
	buf []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		_, _ = l.w.Write(append([]byte("pi: "), l.buf[:i+1]...))
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 { // a line that never ends is still shown
		l.Flush()
	}
	return len(p), nil
}

// Flush writes what is left of an unterminated line.
func (l *lineWriter) Flush() {
	if len(l.buf) > 0 {
		_, _ = l.w.Write(append(append([]byte("pi: "), l.buf...), '\n'))
		l.buf = nil
	}
}
