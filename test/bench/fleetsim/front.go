package fleetsim

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/inbox"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/operator/dash"
	"github.com/pidispatch/pidispatch/valkey"
)

// gitlabIssue is GitLab's documented issue event (forge/testdata), the
// body each simulated delivery varies.
//
//go:embed testdata/gitlab_issue.json
var gitlabIssue []byte

// repos is how many repositories the deliveries are spread over: each is
// a scope with its own fleet-wide slots.
const repos = 50

// receiver is one `pi-dispatch receive`: the durable inbox deliveries are
// stored in before they are answered, processed by a handler that routes
// and enqueues each as the intake does (enqueue.Router).
type receiver struct {
	sim    *sim
	rc     *redis.Client
	inbox  *inbox.Inbox
	router *enqueue.Router
}

func (s *sim) openReceiver(name, spool string) (*receiver, error) {
	rc, err := valkey.NewClient(s.url, valkey.Options{})
	if err != nil {
		return nil, err
	}
	rc.AddHook(s.hook)
	p, err := enqueue.NewProducer(rc, enqueue.ProducerConfig{WorkerName: name, FleetKey: s.key})
	if err != nil {
		_ = rc.Close()
		return nil, err
	}
	r := &receiver{sim: s, rc: rc, router: enqueue.NewRouter(p, enqueue.RouterConfig{})}
	r.inbox, err = inbox.Open(inbox.Config{Valkey: rc, Handler: r, SpoolDir: spool, Host: name, Forges: []jobs.Forge{jobs.ForgeGitLab}})
	if err != nil {
		_ = rc.Close()
		return nil, err
	}
	return r, nil
}

// Handle routes and enqueues one delivery's job (the intake's last step,
// without its trigger match and permission lookup, which ask the forge).
func (r *receiver) Handle(ctx context.Context, ev forge.Event) (forge.Outcome, error) {
	id := "gl-" + ev.DeliveryID
	job := jobs.Job{
		Kind: jobs.KindForge, Repo: ev.Repo, Flow: "fix", Task: "simulated issue", SecretsProfile: secretProfile,
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitLab, RepoID: ev.RepoID, Number: ev.Number, DeliveryID: ev.DeliveryID, Trigger: "sim"},
	}
	r.sim.enqueued.Store(id, time.Now())
	var e enqueue.Enqueued
	err := r.sim.rec.time(OpEnqueue, func() error {
		var err error
		e, err = r.router.EnqueueForge(withOp(ctx, OpEnqueue), enqueue.ForgeDelivery{JobID: id, Job: job})
		return err
	})
	if err != nil || !e.Added {
		r.sim.enqueued.Delete(id)
	}
	if err != nil {
		return forge.Outcome{}, err
	}
	return forge.Outcome{Status: "enqueued", JobIDs: []string{e.JobID}}, nil
}

func (r *receiver) close() {
	r.inbox.Close()
	_ = r.rc.Close()
}

// deliveries makes the bodies the forge would send: GitLab's issue event
// with its own issue number, in one of the repositories.
type deliveries struct {
	mu   sync.Mutex
	tmpl map[string]any
	n    int
	run  string
}

func newDeliveries() (*deliveries, error) {
	var m map[string]any
	if err := json.Unmarshal(gitlabIssue, &m); err != nil {
		return nil, fmt.Errorf("testdata/gitlab_issue.json: %w", err)
	}
	return &deliveries{tmpl: m, run: fmt.Sprintf("%08x", rand.Uint32())}, nil
}

func (d *deliveries) next() (inbox.Delivery, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	attrs, _ := d.tmpl["object_attributes"].(map[string]any)
	project, _ := d.tmpl["project"].(map[string]any)
	if attrs == nil || project == nil {
		return inbox.Delivery{}, errors.New("testdata/gitlab_issue.json: no object_attributes or project")
	}
	attrs["iid"] = d.n
	attrs["description"] = "simulated delivery " + d.run + " " + fmt.Sprint(d.n)
	path := fmt.Sprintf("gitlabhq/repo-%d", d.n%repos)
	project["path_with_namespace"] = path
	project["git_http_url"] = "http://example.com/" + path + ".git"
	body, err := json.Marshal(d.tmpl)
	if err != nil {
		return inbox.Delivery{}, err
	}
	return inbox.Delivery{Forge: jobs.ForgeGitLab, ID: fmt.Sprintf("sim-%s-%d", d.run, d.n), Event: "Issue Hook", Body: body, Received: time.Now()}, nil
}

// deliver sends deliveries at rate per second, round-robin over the
// receivers, until ctx ends.
func (s *sim) deliver(ctx context.Context, recv []*receiver, rate float64) {
	if rate <= 0 || len(recv) == 0 {
		return
	}
	gap := time.Duration(float64(time.Second) / rate)
	t := time.NewTicker(gap)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d, err := s.bodies.next()
		if err != nil {
			s.rec.add(OpReceiverPut, 0, err)
			continue
		}
		r := recv[i%len(recv)]
		_ = s.rec.time(OpReceiverPut, func() error {
			_, err := r.inbox.Put(withOp(ctx, OpReceiverPut), d)
			return err
		})
	}
}

// operatorSide is an operator's `pi-dispatch status` and an open dashboard.
type operatorSide struct {
	sim    *sim
	rc     *redis.Client
	src    *dash.Valkey
	dash   *dash.Handler
	cookie *http.Cookie
}

func (s *sim) openOperator() (*operatorSide, error) {
	rc, err := valkey.NewClient(s.url, valkey.Options{})
	if err != nil {
		return nil, err
	}
	rc.AddHook(s.hook)
	src, err := dash.NewValkey(rc, dash.ValkeyConfig{Host: "operator", FleetKey: s.key})
	if err != nil {
		_ = rc.Close()
		return nil, err
	}
	h, err := dash.New(src, dash.Options{Host: "operator"})
	if err != nil {
		_ = rc.Close()
		return nil, err
	}
	// The one-time login, as the browser makes it.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, h.LoginURL("http://127.0.0.1"), nil))
	var cookie *http.Cookie
	for _, c := range w.Result().Cookies() {
		if c.Name == dash.SessionCookie {
			cookie = c
		}
	}
	if cookie == nil {
		_ = rc.Close()
		return nil, fmt.Errorf("dashboard login answered %d without a session", w.Code)
	}
	return &operatorSide{sim: s, rc: rc, src: src, dash: h, cookie: cookie}, nil
}

// status is `pi-dispatch status`: the fleet's queues, then every queue's
// counts.
func (o *operatorSide) status(ctx context.Context) {
	ctx = withOp(ctx, OpStatus)
	_ = o.sim.rec.time(OpStatus, func() error {
		set, err := operator.FleetQueues(ctx, o.rc)
		if err != nil {
			return err
		}
		_, err = operator.StatusPerQueue(ctx, o.rc, set)
		return err
	})
}

// dashboard is one poll of the open page: GET /api/state.
func (o *operatorSide) dashboard(ctx context.Context) {
	req := httptest.NewRequestWithContext(withOp(ctx, OpDashboard), http.MethodGet, "/api/state", nil)
	req.AddCookie(o.cookie)
	_ = o.sim.rec.time(OpDashboard, func() error {
		w := httptest.NewRecorder()
		o.dash.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			return fmt.Errorf("dashboard state answered %d", w.Code)
		}
		var st struct {
			Errors map[string]string `json:"errors"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
			return fmt.Errorf("dashboard state: %w", err)
		}
		if len(st.Errors) > 0 {
			return fmt.Errorf("dashboard state has read errors: %v", st.Errors)
		}
		return nil
	})
}

func (o *operatorSide) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = o.src.Close(ctx)
	_ = o.rc.Close()
}
