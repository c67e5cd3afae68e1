package forgetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// GiteaVersion is the Gitea StartGitea runs, built by build-gitea.sh.
const GiteaVersion = "v1.27.3"

// giteaWait is how long a test that requires live services waits for a build
// already under way (.ci/run starts it in the background) to finish.
const giteaWait = 20 * time.Minute

// GiteaBinary is where build-gitea.sh caches the Gitea build:
// ${XDG_CACHE_HOME:-$HOME/.cache}/pidispatch/bin/gitea-<version>.
func GiteaBinary() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "pidispatch", "bin", "gitea-"+GiteaVersion), nil
}

// Gitea is a real Gitea on loopback, with an admin and its token.
type Gitea struct {
	URL        string
	AdminUser  string
	AdminToken string
	Dir        string
}

// StartGitea runs Gitea headless on loopback with SQLite, for the test only.
// Without its cached build the test skips, or, when live services are
// required (PIDISPATCH_REQUIRE_LIVE=1), waits for a build under way and then
// fails naming the build script.
func StartGitea(t testing.TB) *Gitea {
	t.Helper()
	livetest.SkipShort(t)
	bin := waitGiteaBinary(t)
	src, err := giteaSource()
	if err != nil {
		t.Fatalf("gitea module source: %v", err)
	}
	dir := t.TempDir()
	port := freePort(t)
	g := &Gitea{URL: fmt.Sprintf("http://127.0.0.1:%d", port), AdminUser: "pi-admin", Dir: dir}
	gc := configureGitea(t, bin, dir, port, src)
	gc.run(t, "migrate")
	g.AdminToken = gc.createAdmin(t, g.AdminUser)
	exited := gc.startWeb(t)
	g.waitReady(t, exited)
	return g
}

// waitGiteaBinary is the cached build; without one the test skips, unless live tests are required.
func waitGiteaBinary(t testing.TB) string {
	t.Helper()
	bin, err := GiteaBinary()
	if err != nil {
		t.Fatalf("gitea binary path: %v", err)
	}
	deadline := time.Now().Add(giteaWait)
	for {
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
		if failed, err := os.ReadFile(bin + ".failed"); err == nil {
			t.Fatalf("the Gitea build failed (forge/forgetest/build-gitea.sh):\n%s", failed)
		}
		if !livetest.Required() {
			t.Skipf("no Gitea build at %s: run forge/forgetest/build-gitea.sh", bin)
		}
		if time.Now().After(deadline) {
			t.Fatalf("live services required (%s=1) and no Gitea build at %s after %s: run forge/forgetest/build-gitea.sh (.ci/run starts it)",
				livetest.EnvRequire, bin, giteaWait)
		}
		time.Sleep(5 * time.Second)
	}
}

// giteaINI is a test Gitea's app.ini (dir, port, static root, secret, token): offline, minimal.
const giteaINI = `APP_NAME = pidispatch-test
RUN_MODE = prod
WORK_PATH = %[1]s
[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[2]d
ROOT_URL = http://127.0.0.1:%[2]d/
DISABLE_SSH = true
START_SSH_SERVER = false
OFFLINE_MODE = true
LFS_START_SERVER = false
STATIC_ROOT_PATH = %[3]s
APP_DATA_PATH = %[1]s/data
[database]
DB_TYPE = sqlite3
PATH = %[1]s/gitea.db
[repository]
ROOT = %[1]s/repos
[security]
INSTALL_LOCK = true
SECRET_KEY = %[4]s
INTERNAL_TOKEN = %[5]s
ALLOWED_HOST_LIST = loopback
[oauth2]
ENABLED = false
[service]
DISABLE_REGISTRATION = true
REQUIRE_SIGNIN_VIEW = false
[mailer]
ENABLED = false
[actions]
ENABLED = false
[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false
[cron]
ENABLED = false
[log]
MODE = console
LEVEL = Warn
`

// giteaCmd runs the Gitea binary on one instance's app.ini, in its folder and environment.
type giteaCmd struct {
	bin, ini, dir string
	env           []string
}

// configureGitea writes the app.ini of a Gitea in dir on port, so it runs apart from any other.
func configureGitea(t testing.TB, bin, dir string, port int, src string) giteaCmd {
	t.Helper()
	ini := filepath.Join(dir, "app.ini")
	conf := fmt.Sprintf(giteaINI, dir, port, src, randHex(16), randHex(32))
	if err := os.WriteFile(ini, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GITEA_WORK_DIR="+dir, "GITEA_CUSTOM="+filepath.Join(dir, "custom"),
		"GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT=true", "HOME="+dir)
	return giteaCmd{bin: bin, ini: ini, dir: dir, env: env}
}

// run runs a Gitea command to its end and returns its output, failing the test when it fails.
func (c giteaCmd) run(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.bin, append(args, "--config", c.ini)...)
	cmd.Env, cmd.Dir = c.env, c.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gitea %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// createAdmin makes the admin user with the CLI and returns its token, which the API needs.
func (c giteaCmd) createAdmin(t testing.TB, user string) string {
	t.Helper()
	c.run(t, "admin", "user", "create", "--admin", "--username", user, "--password", "pw-"+randHex(12),
		"--email", "admin@example.invalid", "--must-change-password=false")
	out := c.run(t, "admin", "user", "generate-access-token", "--username", user, "--token-name", "test",
		"--scopes", "all", "--raw")
	lines := strings.Split(out, "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// startWeb starts gitea web, logging to gitea.log, until the test ends; exited closes on its exit.
func (c giteaCmd) startWeb(t testing.TB) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, c.bin, "web", "--config", c.ini)
	cmd.Env, cmd.Dir = c.env, c.dir
	logFile, err := os.Create(filepath.Join(c.dir, "gitea.log"))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("gitea web: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cancel()
		<-exited
		_ = logFile.Close()
	})
	return exited
}

// waitReady waits for the API to answer, failing the test if Gitea exits or takes 2 minutes.
func (g *Gitea) waitReady(t testing.TB, exited <-chan struct{}) {
	t.Helper()
	for start := time.Now(); ; {
		resp, err := http.Get(g.URL + "/api/v1/version")
		if err == nil {
			var v struct{ Version string }
			_ = json.NewDecoder(resp.Body).Decode(&v)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && v.Version != "" {
				return
			}
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(g.Dir, "gitea.log"))
			t.Fatalf("gitea web exited: %s", log)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("gitea did not answer on %s", g.URL)
		}
	}
}

// giteaSource is the module source folder (templates, options) Gitea serves from.
func giteaSource() (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", "code.gitea.io/gitea@"+GiteaVersion).Output()
	if err != nil {
		return "", err
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download: no source folder")
	}
	return m.Dir, nil
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// API calls the Gitea API as the holder of token (the admin's when empty):
// method, a path under /api/v1, a JSON body (nil for none). It fails the test
// on a transport error or a status other than 2xx and returns the body.
func (g *Gitea) API(t testing.TB, token, method, path string, body any) []byte {
	t.Helper()
	if token == "" {
		token = g.AdminToken
	}
	return g.call(t, method, path, body, func(r *http.Request) { r.Header.Set("Authorization", "token "+token) })
}

func (g *Gitea) call(t testing.TB, method, path string, body any, auth func(*http.Request)) []byte {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, g.URL+"/api/v1"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	auth(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("gitea %s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("gitea %s %s: %v", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		t.Fatalf("gitea %s %s: %s: %s", method, path, resp.Status, out)
	}
	return out
}

// GiteaUser is a user CreateUser made, with an access token of every scope.
type GiteaUser struct {
	ID    int64
	Login string
	Token string
}

// CreateUser makes a user (a site admin when admin is true) and an access
// token for it.
func (g *Gitea) CreateUser(t testing.TB, login string, admin bool) GiteaUser {
	t.Helper()
	pw := "pw-" + randHex(12)
	var u struct {
		ID int64 `json:"id"`
	}
	out := g.API(t, "", http.MethodPost, "/admin/users", map[string]any{
		"username": login, "email": login + "@example.invalid", "password": pw, "must_change_password": false,
	})
	if err := json.Unmarshal(out, &u); err != nil || u.ID == 0 {
		t.Fatalf("gitea create user %s: %v: %s", login, err, out)
	}
	if admin {
		g.API(t, "", http.MethodPatch, "/admin/users/"+login, map[string]any{"admin": true, "login_name": login, "source_id": 0})
	}
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	out = g.call(t, http.MethodPost, "/users/"+login+"/tokens", map[string]any{"name": "test", "scopes": []string{"all"}},
		func(r *http.Request) { r.SetBasicAuth(login, pw) })
	if err := json.Unmarshal(out, &tok); err != nil || tok.SHA1 == "" {
		t.Fatalf("gitea token for %s: %v", login, err)
	}
	return GiteaUser{ID: u.ID, Login: login, Token: tok.SHA1}
}
