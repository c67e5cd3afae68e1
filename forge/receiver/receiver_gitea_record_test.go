package receiver_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/forgetest"
)

// recordEnv, set to 1, makes TestRecordGiteaDeliveries record the Forgejo
// test payloads afresh from a real Gitea into ../testdata/forgejo.
const recordEnv = "PIDISPATCH_RECORD_FORGEJO"

// recordedHeaders are the delivery headers kept beside each recorded body.
var recordedHeaders = []string{
	"X-Gitea-Event", "X-Gitea-Event-Type", "X-Gitea-Delivery", "X-Gitea-Signature",
	"X-Hub-Signature-256", "Content-Type",
}

// TestRecordGiteaDeliveries records the payloads the Forgejo tests replay:
// a real Gitea (forgetest.StartGitea) with a signed webhook (secret fjSecret)
// on acme/widgets delivers an issue labelled, a comment, an issue closed and
// a pull request opened to a loopback server, which writes each body as sent
// and its headers to ../testdata/forgejo/<name>.json and <name>.headers.json.
//
//	PIDISPATCH_RECORD_FORGEJO=1 go test -run TestRecordGiteaDeliveries ./forge/receiver/
func TestRecordGiteaDeliveries(t *testing.T) {
	if os.Getenv(recordEnv) != "1" {
		t.Skipf("records testdata only with %s=1", recordEnv)
	}
	g := forgetest.StartGitea(t)
	type delivery struct {
		body    []byte
		headers map[string]string
	}
	var mu sync.Mutex
	got := map[string]delivery{}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var p struct {
			Action string `json:"action"`
		}
		_ = json.Unmarshal(body, &p)
		h := map[string]string{}
		for _, k := range recordedHeaders {
			h[k] = r.Header.Get(k)
		}
		mu.Lock()
		got[r.Header.Get("X-Gitea-Event-Type")+"_"+p.Action] = delivery{body, h}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()

	api := func(method, path string, body any) map[string]any {
		t.Helper()
		var m map[string]any
		require.NoError(t, json.Unmarshal(g.API(t, "", method, path, body), &m))
		return m
	}
	api(http.MethodPost, "/orgs", map[string]any{"username": "acme", "visibility": "public"})
	api(http.MethodPost, "/orgs/acme/repos", map[string]any{"name": "widgets", "auto_init": true, "default_branch": "main"})
	api(http.MethodPost, "/repos/acme/widgets/hooks", map[string]any{
		"type": "gitea", "active": true, "events": []string{"issues", "pull_request"},
		"config": map[string]string{"url": hook.URL + "/forgejo", "content_type": "json", "secret": fjSecret},
	})
	label := api(http.MethodPost, "/repos/acme/widgets/labels", map[string]any{"name": "pi:fix", "color": "#e11d21"})
	issue := api(http.MethodPost, "/repos/acme/widgets/issues", map[string]any{"title": "The widget wobbles", "body": "It wobbles when spun."})
	n := int(issue["number"].(float64))
	g.API(t, "", http.MethodPost, fmt.Sprintf("/repos/acme/widgets/issues/%d/labels", n), map[string]any{"labels": []any{label["id"]}})
	api(http.MethodPost, fmt.Sprintf("/repos/acme/widgets/issues/%d/comments", n), map[string]any{"body": "/pi fix please"})
	api(http.MethodPatch, fmt.Sprintf("/repos/acme/widgets/issues/%d", n), map[string]any{"state": "closed"})
	api(http.MethodPost, "/repos/acme/widgets/contents/steady.txt", map[string]any{
		"content": "c3RlYWR5Cg==", "message": "Steady the widget", "branch": "main", "new_branch": "steady",
	})
	api(http.MethodPost, "/repos/acme/widgets/pulls", map[string]any{"title": "Steady the widget", "head": "steady", "base": "main"})

	want := map[string]string{
		"issue_label_label_updated": "issues_label_updated",
		"issue_comment_created":     "issue_comment_created",
		"issues_closed":             "issues_closed",
		"pull_request_opened":       "pull_request_opened",
	}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		missing := 0
		for k := range want {
			if _, ok := got[k]; !ok {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			keys := []string{}
			for k := range got {
				keys = append(keys, k)
			}
			t.Fatalf("%d deliveries missing; got %v", missing, keys)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	dir := filepath.Join("..", "testdata", "forgejo")
	for k, name := range want {
		d := got[k]
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".json"), d.body, 0o644))
		h, err := json.MarshalIndent(d.headers, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".headers.json"), append(h, '\n'), 0o644))
	}
}
