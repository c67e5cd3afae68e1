// Package secrettest checks, for live tests, that a secret (a forge token)
// reached nothing a job could see or a run left behind: a container's
// environment and mounted files, the logs folder (records and transcripts),
// the Valkey database, and any other text a test collected.
package secrettest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
)

// Spy records what each container is given (its environment, and every
// file of its mounts as they are when it starts), then runs it with the
// runtime it wraps. Option installs it in a stack.
type Spy struct {
	dispatch.Runtime

	mu    sync.Mutex
	env   []string
	files map[string]string
}

// Option wraps the stack's runtime with s; it is a stack.Option.
func (s *Spy) Option(d *dispatch.Deps) {
	s.Runtime, d.Runtime = d.Runtime, s
}

// Run records spec's environment and its mounts' files, then runs it.
func (s *Spy) Run(ctx context.Context, spec container.Spec) (container.Result, error) {
	s.mu.Lock()
	if s.files == nil {
		s.files = map[string]string{}
	}
	for k, v := range spec.Env {
		s.env = append(s.env, k+"="+v)
	}
	for _, dir := range []string{spec.JobDir, spec.WorkspaceDir, spec.ModelSocketDir} {
		if dir == "" {
			continue
		}
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				b, _ := os.ReadFile(p)
				s.files[p] = string(b)
			}
			return nil
		})
	}
	s.mu.Unlock()
	return s.Runtime.Run(ctx, spec)
}

// RemoveContainer is the wrapped runtime's.
func (s *Spy) RemoveContainer(ctx context.Context, name string) error {
	return s.Runtime.(interface {
		RemoveContainer(context.Context, string) error
	}).RemoveContainer(ctx, name)
}

// Seen returns the environment entries (KEY=value) and the mounted files
// (by path) of every container run so far.
func (s *Spy) Seen() (env []string, files map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	files = make(map[string]string, len(s.files))
	for p, b := range s.files {
		files[p] = b
	}
	return append([]string(nil), s.env...), files
}

// Texts gathers what a forge run exposed or left behind: the environment
// and mounted files spy saw (which must include a workspace's .git/config),
// every file under logsDir, and every Valkey key's dump. It fails the test
// when one of them is empty, so an absence check over them cannot pass
// vacuously.
func Texts(t testing.TB, spy *Spy, logsDir string, db redis.UniversalClient) []string {
	t.Helper()
	env, files := spy.Seen()
	if len(env) == 0 {
		t.Fatal("no container was run")
	}
	texts := []string{strings.Join(env, "\n")}
	var sawGitConfig bool
	for p, body := range files {
		texts = append(texts, body)
		sawGitConfig = sawGitConfig || strings.HasSuffix(p, "/.git/config")
	}
	if !sawGitConfig {
		t.Fatal("no workspace .git/config was mounted")
	}
	var logFiles int
	err := filepath.WalkDir(logsDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		texts = append(texts, string(b))
		logFiles++
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if logFiles == 0 {
		t.Fatalf("no file under %s", logsDir)
	}
	ctx := context.Background()
	keys, err := db.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no Valkey key")
	}
	for _, k := range keys {
		dump, err := db.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, dump)
	}
	return texts
}

// Absent fails the test when a text holds one of secrets or an HTTP basic
// authorization header.
func Absent(t testing.TB, texts, secrets []string) {
	t.Helper()
	if len(secrets) == 0 {
		t.Fatal("no secret to look for")
	}
	for i, text := range texts {
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				t.Errorf("text %d holds a secret", i)
			}
		}
		if strings.Contains(text, "Authorization: Basic") {
			t.Errorf("text %d holds an authorization header", i)
		}
	}
}
