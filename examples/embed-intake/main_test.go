package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// The embedded intake boots on live Valkey against a GitHub API double,
// turns a signed comment delivery into one queued job under the service's own
// logger, and stops cleanly when its context ends.
func TestRun_ServesADeliveryAndStops(t *testing.T) {
	db := livetest.Valkey(t)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/user":
			fmt.Fprint(w, `{"id":999,"login":"pi-bot"}`)
		case "/repos/Codertocat/Hello-World/collaborators/Codertocat/permission":
			fmt.Fprint(w, `{"permission":"write","role_name":"write"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer api.Close()
	triggers := filepath.Join(t.TempDir(), "triggers.json")
	if err := os.WriteFile(triggers, []byte(`{"triggers": [{"on": {"type": "comment", "id": "c",
	  "repos": ["Codertocat/Hello-World"], "phrase": "totally right"}, "run": {"kind": "github", "flow": "fix"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(keyFile, []byte("the embedded intake's fleet key, 32 bytes+"), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := fleet.LoadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	vars := map[string]string{
		"VALKEY_URL": db.URL, "PI_FLEET_KEY_FILE": keyFile, "PI_TRIGGERS_FILE": triggers, "WEBHOOK_SECRET": "embed-secret",
		"GITHUB_PAT": "ghp_embed", "GITHUB_API_URL": api.URL,
		"RECEIVER_BIND": "127.0.0.1", "RECEIVER_PORT": strconv.Itoa(port), "RECEIVER_SPOOL_DIR": t.TempDir(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr logtest.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return vars[k] }, &stderr) }()

	base := "http://127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(30 * time.Second); !up(base); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the intake did not come up:\n%s", stderr.String())
		}
	}
	body := fixtures.GitHub(t, "issue_comment", "created", 0)
	if got := fixtures.PostGitHub(t, base+"/github", "issue_comment", "embed-d1", "embed-secret", body); got != http.StatusAccepted {
		t.Fatalf("delivery answered %d:\n%s", got, stderr.String())
	}
	q, err := queue.New(db.Client, "pi-jobs", queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The delivery is stored, answered, then processed: the job follows,
	// named by its body's digest and signed with the fleet key.
	var j *queue.Job
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if j = onlyForgeJob(t, db, q); j != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no gh- job on pi-jobs:\n%s", stderr.String())
		}
	}
	if !key.VerifyJob(q.Name(), j.ID, j.Data, j.Signature) {
		t.Fatalf("job %s is not signed with the fleet key", j.ID)
	}
	if got, err := jobs.ParseJob(j.Data); err != nil || got.Repo != "Codertocat/Hello-World" || got.Trigger != "c" {
		t.Fatalf("job %+v, %v", got, err)
	}
	if !strings.Contains(stderr.String(), `"service":"embed-intake"`) || strings.Contains(stderr.String(), "ghp_embed") {
		t.Fatalf("the service's logger is not used, or the token was logged:\n%s", stderr.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the intake did not stop with its context")
	}
}

func up(base string) bool {
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// onlyForgeJob is the one gh- job on q, or nil while there is none.
func onlyForgeJob(t *testing.T, db *livetest.ValkeyDB, q *queue.Queue) *queue.Job {
	t.Helper()
	keys, err := db.Client.Keys(context.Background(), "bull:"+q.Name()+":gh-*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range keys {
		if id := strings.TrimPrefix(k, "bull:"+q.Name()+":"); !strings.Contains(id, ":") {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if len(ids) > 1 {
		t.Fatalf("jobs %v, want one", ids)
	}
	j, err := q.Get(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	return j
}
