// Package forgetest gives forge tests real forges on loopback: a git server
// speaking git's smart HTTP (git http-backend), a GitHub REST double that
// answers with go-github's types, and a real Gitea (StartGitea).
package forgetest

import (
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// GitServer serves the bare repositories under Root over git's smart HTTP at
// URL/<owner>/<name>.git, pushes included, behind basic auth that Allow
// decides. A forge double serves the same repositories on its own address
// too (ServeHTTP), as a forge serves git where its API is.
type GitServer struct {
	URL  string
	Root string

	backend http.Handler
	mu      sync.Mutex
	allow   func(user, password string) bool
	seen    []string // every password presented
	hits    int      // every request, answered or refused
}

// StartGitServer starts a git server on loopback; allow decides a basic-auth
// pair (nil: any request is refused).
func StartGitServer(t testing.TB, allow func(user, password string) bool) *GitServer {
	t.Helper()
	livetest.SkipShort(t)
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	s := &GitServer{Root: t.TempDir(), allow: allow}
	h := &cgi.Handler{
		Path: backend,
		Env: []string{
			"GIT_PROJECT_ROOT=" + s.Root, "GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=" + s.Root,
			"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=http.receivepack", "GIT_CONFIG_VALUE_0=true",
			"GIT_CONFIG_KEY_1=uploadpack.allowAnySHA1InWant", "GIT_CONFIG_VALUE_1=true",
		},
	}
	s.backend = h
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// ServeHTTP serves git's smart HTTP for the repositories, behind the basic
// auth Allow decides, recording every password presented.
func (s *GitServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, pass, ok := r.BasicAuth()
	s.mu.Lock()
	s.hits++
	if ok {
		s.seen = append(s.seen, pass)
	}
	allow := s.allow
	s.mu.Unlock()
	if !ok || allow == nil || !allow(user, pass) {
		w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	s.backend.ServeHTTP(w, r)
}

// Requests counts the requests the server was sent, refused ones included.
func (s *GitServer) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}

// isGitPath reports whether path is a request of git's to a repository
// (<owner>/<name>.git/...), which a forge double hands to its GitServer.
func isGitPath(path string) bool { return strings.Contains(path, ".git/") }

// SetAllow replaces the auth decision.
func (s *GitServer) SetAllow(allow func(user, password string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allow = allow
}

// Passwords are every basic-auth password the server was sent.
func (s *GitServer) Passwords() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// CloneURL is repo's URL on the git server's own address; a forge double
// answers its own (GitHub.CloneURL, GitLab.CloneURL).
func (s *GitServer) CloneURL(repo string) string { return s.URL + "/" + repo + ".git" }

// Dir is repo's bare repository on disk.
func (s *GitServer) Dir(repo string) string { return filepath.Join(s.Root, repo+".git") }

// CreateRepo makes repo with one commit on branch holding files.
func (s *GitServer) CreateRepo(t testing.TB, repo, branch string, files map[string]string) string {
	t.Helper()
	work := t.TempDir()
	Git(t, work, "init", "-q", "-b", branch, ".")
	for name, body := range files {
		p := filepath.Join(work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, work, "add", "-A")
	Git(t, work, "commit", "-q", "-m", "initial")
	dir := s.Dir(repo)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	Git(t, "", "clone", "-q", "--bare", work, dir)
	return s.Head(t, repo, branch)
}

// Head is the commit branch of repo points at ("" when it does not exist).
func (s *GitServer) Head(t testing.TB, repo, branch string) string {
	t.Helper()
	out, err := gitCmd(s.Dir(repo), "rev-parse", "--verify", "-q", "refs/heads/"+branch).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Git runs git in dir (a plain, local invocation for test setup).
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitCmd(dir, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func gitCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.invalid",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.invalid",
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.directory", "GIT_CONFIG_VALUE_0=*")
	return cmd
}

// Commit adds a commit to branch of repo (made from from, or branch itself)
// writing files, and returns it.
func (s *GitServer) Commit(t testing.TB, repo, from, branch string, files map[string]string) string {
	t.Helper()
	work := t.TempDir()
	Git(t, work, "clone", "-q", "--branch", from, s.Dir(repo), ".")
	for name, body := range files {
		p := filepath.Join(work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, work, "add", "-A")
	Git(t, work, "commit", "-q", "-m", "change")
	Git(t, work, "push", "-q", "origin", "HEAD:refs/heads/"+branch)
	return s.Head(t, repo, branch)
}
