package receiver_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/forge/receiver"
	fixtures "github.com/pidispatch/pidispatch/internal/testkit/forgefixtures"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// replayTarget is a real receiver whose intake enqueues into the test's
// Valkey through the real router: in its inbox mode, or synchronous with the
// Valkey replay store.
type replayTarget struct {
	srv    *httptest.Server
	client redis.UniversalClient
	inbox  *inbox.Inbox
	logs   *logtest.Buffer
}

func newReplayTarget(t *testing.T, client redis.UniversalClient, withInbox bool) *replayTarget {
	t.Helper()
	logs := &logtest.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	p, err := enqueue.NewProducer(client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}})
	require.NoError(t, err)
	fts, err := cronsync.ParseForgeTriggers([]byte(triggersFile))
	require.NoError(t, err)
	allowAll := permFunc(func(context.Context, forge.Event, forge.Need) (bool, error) { return true, nil })
	in, err := forge.NewIntake(forge.IntakeConfig{Enqueuer: enqueue.NewRouter(p, enqueue.RouterConfig{}), Logger: log, Host: "h1",
		Permissions: map[jobs.Forge]forge.Permissions{jobs.ForgeGitHub: allowAll, jobs.ForgeForgejo: allowAll}})
	require.NoError(t, err)
	in.SetTriggers(fts)
	rt := &replayTarget{client: client, logs: logs}
	cfg := receiver.Config{Intake: in, GitHubSecret: ghSecret, ForgejoSecret: fjSecret, Logger: log, Host: "h1"}
	if withInbox {
		rt.inbox, err = inbox.Open(inbox.Config{Valkey: client, Handler: in, SpoolDir: filepath.Join(t.TempDir(), "spool"),
			Poll: 20 * time.Millisecond, Logger: log, Host: "h1"})
		require.NoError(t, err)
		t.Cleanup(rt.inbox.Close)
		cfg.Inbox = rt.inbox
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = rt.inbox.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	} else {
		cfg.Replay = receiver.ValkeyReplay{Client: client}
	}
	r, err := receiver.New(cfg)
	require.NoError(t, err)
	rt.srv = httptest.NewServer(r.Handler())
	t.Cleanup(rt.srv.Close)
	return rt
}

// post sends body, signed with the forge's secret, under the delivery id.
func (rt *replayTarget) post(t *testing.T, route string, headers map[string]string, body []byte) int {
	t.Helper()
	h := &harness{srv: rt.srv}
	status, _ := h.post(t, route, body, headers)
	return status
}

// settle waits until the inbox has decided everything it stored (at once
// in the synchronous mode).
func (rt *replayTarget) settle(t *testing.T) {
	t.Helper()
	if rt.inbox == nil {
		return
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := int64(0)
		for _, f := range inbox.Forges {
			l, err := rt.inbox.Store().Length(context.Background(), f)
			require.NoError(t, err)
			n += l
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the inbox still holds %d deliveries:\n%s", n, rt.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// forgetDedup ends the enqueue's 10-minute dedup at once, as 10 minutes
// passing would: the replay defence must not lean on it.
func (rt *replayTarget) forgetDedup(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	keys, err := rt.client.Keys(ctx, "bull:*:de:*").Result()
	require.NoError(t, err)
	if len(keys) > 0 {
		require.NoError(t, rt.client.Del(ctx, keys...).Err())
	}
}

// jobs are the ids of the jobs the fleet's shared queue holds.
func (rt *replayTarget) jobs(t *testing.T) []string {
	t.Helper()
	q, err := queue.New(rt.client, "pi-jobs", queue.Config{})
	require.NoError(t, err)
	ids, err := q.PendingIDs(context.Background(), 100)
	require.NoError(t, err)
	slices.Sort(ids)
	return ids
}

// The attacker holds one delivery the forge signed (a body and its
// signature, from a proxy's log, say) and re-sends it under new delivery
// ids, past the enqueue's 10-minute dedup: it stays one job. Two events of
// the forge, two bodies, are two jobs. In both of the receiver's modes, for
// GitHub and for Forgejo (whose "issues" and "issue_label" event types read
// a label body alike).
func TestSignedBodyUnderNewDeliveryIDsIsOneJob(t *testing.T) {
	for _, mode := range []struct {
		name  string
		inbox bool
	}{{"inbox", true}, {"synchronous", false}} {
		t.Run(mode.name+"/github", func(t *testing.T) {
			db := livetest.Valkey(t)
			rt := newReplayTarget(t, db.Client, mode.inbox)
			body := fixtures.GitHub(t, "issue_comment", "created", 0)
			for i, id := range []string{"3f0c2a10-0000-11f0-8000-000000000001", "attacker-2", "attacker-3"} {
				status := rt.post(t, "/github", githubHeaders("issue_comment", id, body), body)
				require.True(t, status/100 == 2 || status == http.StatusConflict, "delivery %d answered %d", i, status)
				rt.settle(t)
				rt.forgetDedup(t)
			}
			got := rt.jobs(t)
			require.Len(t, got, 1, "one signed body under three delivery ids: %v\n%s", got, rt.logs.String())

			// Another event of the forge (another issue's comment): its own job.
			other := fixtures.Edit(t, body, func(m map[string]any) {
				m["issue"].(map[string]any)["number"] = 4242
				m["comment"].(map[string]any)["id"] = 4242
			})
			status := rt.post(t, "/github", githubHeaders("issue_comment", "3f0c2a10-0000-11f0-8000-000000000002", other), other)
			require.Equal(t, 2, status/100, "the second event answered %d", status)
			rt.settle(t)
			assert.Len(t, rt.jobs(t), 2, "two bodies, two jobs:\n%s", rt.logs.String())
		})
		t.Run(mode.name+"/forgejo", func(t *testing.T) {
			db := livetest.Valkey(t)
			rt := newReplayTarget(t, db.Client, mode.inbox)
			body := fixtures.File(t, "forgejo", "issues_label_updated.json")
			for i, c := range []struct{ event, id string }{{"issues", "fj-1"}, {"issue_label", "fj-2"}, {"issues", "fj-3"}} {
				status := rt.post(t, "/forgejo", map[string]string{"X-Gitea-Event": c.event, "X-Gitea-Delivery": c.id,
					"X-Gitea-Signature": fixtures.HexHMAC(fjSecret, body)}, body)
				require.True(t, status/100 == 2 || status == http.StatusConflict, "delivery %d answered %d", i, status)
				rt.settle(t)
				rt.forgetDedup(t)
			}
			got := rt.jobs(t)
			assert.Len(t, got, 1, "one signed body under three delivery ids and two event types: %v\n%s", got, rt.logs.String())
		})
	}
}
