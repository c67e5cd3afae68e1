package cronsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// The seed's legitimate-edit sequence on two hosts that each keep their
// schedulers on their own queue and each serve only their own folders.
func TestTwoHostEditSequence(t *testing.T) {
	db := livetest.Valkey(t)
	folderA, folderB, folderShared := t.TempDir(), t.TempDir(), t.TempDir()
	v1 := triggersFile(
		cronTrigger{id: "a-nightly", pattern: "0 3 * * *", folder: folderA},
		cronTrigger{id: "b-nightly", pattern: "0 4 * * *", folder: folderB},
		cronTrigger{id: "shared", pattern: "0 5 * * *", folder: folderShared},
	)
	v2 := triggersFile(
		cronTrigger{id: "a-nightly", pattern: "0 3 * * *", folder: folderA},
		cronTrigger{id: "b-nightly", pattern: "0 4 * * *", folder: folderB},
		cronTrigger{id: "shared", pattern: "0 5 * * *", folder: folderShared},
		cronTrigger{id: "a-hourly", pattern: "0 * * * *", folder: folderA},
		cronTrigger{id: "b-hourly", pattern: "30 * * * *", folder: folderB},
	)
	a := newHost(t, db, "a", "UTC", Own{Configured: true, Entries: mustParse(t, v1)}, folderA, folderShared)
	b := newHost(t, db, "b", "UTC", Own{Configured: true, Entries: mustParse(t, v1)}, folderB, folderShared)
	wantA1, wantB1 := []string{"a-nightly", "shared"}, []string{"b-nightly", "shared"}
	wantA2, wantB2 := []string{"a-hourly", "a-nightly", "shared"}, []string{"b-hourly", "b-nightly", "shared"}
	assertSets := func(step string, wantA, wantB []string) {
		t.Helper()
		if got := a.ids(t); !slices.Equal(got, wantA) {
			t.Fatalf("%s: a's queue holds %v, want %v", step, got, wantA)
		}
		if got := b.ids(t); !slices.Equal(got, wantB) {
			t.Fatalf("%s: b's queue holds %v, want %v", step, got, wantB)
		}
	}

	// Boot: a is alone, b then finds a agreeing.
	if gr := a.gate(t); gr.Refused != "" || gr.Result.Installed != 2 {
		t.Fatalf("a at boot: %+v", gr)
	}
	gr := b.gate(t)
	if gr.Refused != "" || gr.Result.Installed != 2 || len(gr.Peers) != 1 || gr.Peers[0].Host != "a" {
		t.Fatalf("b at boot: %+v", gr)
	}
	if ev := b.logs.Events(t, "cron_agreement"); len(ev) != 1 || ev[0]["peers"] != float64(1) || ev[0]["host"] != "b" {
		t.Fatalf("b's cron_agreement = %v", ev)
	}
	assertSets("boot", wantA1, wantB1)
	fpV1 := gr.Mine

	// The operator edits a's file: a refuses, b still holds the old set.
	a.live.Update(mustParse(t, v2))
	gr = a.gate(t)
	if gr.Refused != RefusedDivergence {
		t.Fatalf("a after its edit: %+v, want a divergence refusal", gr)
	}
	if len(gr.Peers) != 1 || gr.Peers[0] != (PeerView{Host: "b", FPCron: fpV1, CronCount: 3}) {
		t.Fatalf("a's refusal names %+v, want b with the old fingerprint and 3 schedules", gr.Peers)
	}
	ev := a.logs.Events(t, "cron_divergence_refused")
	if len(ev) != 1 || ev[0]["host"] != "a" || ev[0]["cronCount"] != float64(5) || ev[0]["reason"] != RefusedDivergence {
		t.Fatalf("a's cron_divergence_refused = %v", ev)
	}
	peers, _ := ev[0]["peers"].([]any)
	if p, _ := peers[0].(map[string]any); len(peers) != 1 || p["host"] != "b" || p["fpCron"] != fpV1 || p["cronCount"] != float64(3) {
		t.Fatalf("a's refusal log peers = %v", ev[0]["peers"])
	}
	assertSets("a refused", wantA1, wantB1)

	// The operator syncs the file to b: b publishes, sees a on the new set, and
	// reconciles.
	b.live.Update(mustParse(t, v2))
	if gr := b.gate(t); gr.Refused != "" || gr.Result.Installed != 3 || gr.Result.Removed != 0 {
		t.Fatalf("b after the sync: %+v", gr)
	}
	assertSets("b synced", wantA1, wantB2)

	// a tries again and now agrees. Neither host ever touched the other's queue.
	if gr := a.gate(t); gr.Refused != "" || gr.Result.Installed != 3 {
		t.Fatalf("a's retry: %+v", gr)
	}
	assertSets("a retried", wantA2, wantB2)
}

// A host with no triggers file abstains and never blocks; a host whose file
// holds no cron entry has an opinion and does.
func TestAbstainVersusOpine(t *testing.T) {
	db := livetest.Valkey(t)
	folder := t.TempDir()
	one := mustParse(t, triggersFile(cronTrigger{id: "nightly", pattern: "0 3 * * *", folder: folder}))

	a := newHost(t, db, "a", "UTC", Own{Configured: true, Entries: one}, folder)
	abstainer := newHost(t, db, "abstainer", "UTC", Own{}, folder)
	ctx := context.Background()
	if err := abstainer.reg.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	// The abstainer's own gate never touches its queue.
	if _, err := abstainer.q.UpsertScheduler(ctx, "left-alone", queue.Scheduler{Pattern: "0 0 1 1 *"}); err != nil {
		t.Fatal(err)
	}
	gr, err := ReconcileGated(ctx, abstainer.q, abstainer.reg, abstainer.live.Own(), nil, abstainer.opts())
	if err != nil || gr.Refused != RefusedCronDisabled {
		t.Fatalf("abstainer's gate = %+v, %v", gr, err)
	}
	if got := abstainer.ids(t); !slices.Equal(got, []string{"left-alone"}) {
		t.Fatalf("the abstainer's gate changed its queue: %v", got)
	}

	if gr := a.gate(t); gr.Refused != "" || gr.Result.Installed != 1 || len(gr.Peers) != 0 {
		t.Fatalf("an abstaining peer blocked a: %+v", gr)
	}
	if ev := a.logs.Events(t, "cron_agreement"); len(ev) != 0 {
		t.Fatalf("cron_agreement logged with no opinion around: %v", ev)
	}

	// A host whose file declares no cron entry: "there should be none".
	empty := mustParse(t, []byte(`{"triggers":[{"on":{"type":"label","any":["x"]},"run":{"kind":"github","flow":"f"}}]}`))
	none := newHost(t, db, "none", "UTC", Own{Configured: true, Entries: empty})
	if err := none.reg.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	gr = a.gate(t)
	if gr.Refused != RefusedDivergence || len(gr.Peers) != 1 || gr.Peers[0].Host != "none" || gr.Peers[0].CronCount != 0 {
		t.Fatalf("an empty opinion did not block a: %+v", gr)
	}

	// a cannot read its own file while an opinion exists: it refuses itself.
	unreadable := Own{Configured: true, Err: errors.New("triggers file: unexpected end of JSON input")}
	served, _ := Served(one, true, a.has)
	gr, err = ReconcileGated(ctx, a.q, a.reg, unreadable, served, a.opts())
	if err != nil || gr.Refused != RefusedOwnUnreadable || gr.Mine != "" {
		t.Fatalf("unreadable own file = %+v, %v", gr, err)
	}
	if ev := a.logs.Events(t, "cron_divergence_refused"); len(ev) != 2 || ev[1]["reason"] != RefusedOwnUnreadable || ev[1]["mine"] != "" {
		t.Fatalf("own-unreadable refusal log = %v", ev)
	}
	if got := a.ids(t); !slices.Equal(got, []string{"nightly"}) {
		t.Fatalf("a refusal changed a's queue: %v", got)
	}
}

// The same file on two hosts in different zones is two different sets of
// instants: they refuse each other.
func TestZonesDisagree(t *testing.T) {
	db := livetest.Valkey(t)
	folder := t.TempDir()
	data := triggersFile(cronTrigger{id: "nightly", pattern: "0 3 * * *", folder: folder})
	ams := newHost(t, db, "ams", "Europe/Amsterdam", Own{Configured: true, Entries: mustParse(t, data)}, folder)
	nyc := newHost(t, db, "nyc", "America/New_York", Own{Configured: true, Entries: mustParse(t, data)}, folder)
	if gr := ams.gate(t); gr.Refused != "" {
		t.Fatalf("ams alone: %+v", gr)
	}
	gr := nyc.gate(t)
	if gr.Refused != RefusedDivergence || len(gr.Peers) != 1 || gr.Peers[0].Host != "ams" {
		t.Fatalf("nyc with a different zone: %+v", gr)
	}
	if got := nyc.ids(t); len(got) != 0 {
		t.Fatalf("nyc installed despite the refusal: %v", got)
	}
}

// fakePeers is a registry double for the gate's decision logic.
type fakePeers struct {
	calls   []string
	hosts   []registry.Host
	readErr error
}

func (f *fakePeers) Publish(context.Context) error {
	f.calls = append(f.calls, "publish")
	return nil
}

func (f *fakePeers) LivePeers(context.Context) ([]registry.Host, error) {
	f.calls = append(f.calls, "read")
	return f.hosts, f.readErr
}

// fakeStore records every call.
type fakeStore struct {
	calls []string
	err   error
}

func (s *fakeStore) UpsertScheduler(_ context.Context, id string, _ queue.Scheduler) (string, error) {
	s.calls = append(s.calls, "upsert "+id)
	return "repeat:" + id + ":1", s.err
}

func (s *fakeStore) RemoveScheduler(_ context.Context, id string) (bool, error) {
	s.calls = append(s.calls, "remove "+id)
	return true, s.err
}

func (s *fakeStore) Schedulers(context.Context) ([]queue.SchedulerInfo, error) {
	s.calls = append(s.calls, "list")
	return nil, s.err
}

func TestGateDecisions(t *testing.T) {
	ctx := context.Background()
	set := mustParse(t, triggersFile(cronTrigger{id: "nightly", pattern: "0 3 * * *", folder: "/srv/a"}))
	mine, err := Fingerprint(set, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	own := Own{Configured: true, Entries: set}
	live := func(name, fp string) registry.Host {
		return registry.Host{Name: name, FPCron: fp, AgeKnown: true, CronCount: 1}
	}
	tests := []struct {
		name    string
		peers   *fakePeers
		own     Own
		refused string
	}{
		{"no peers", &fakePeers{}, own, ""},
		{"agreeing peer", &fakePeers{hosts: []registry.Host{live("b", mine)}}, own, ""},
		{"abstaining peer", &fakePeers{hosts: []registry.Host{live("b", "")}}, own, ""},
		{"undatable peer", &fakePeers{hosts: []registry.Host{{Name: "b", FPCron: "0123456789abcdef"}}}, own, ""},
		{"registry unreachable", &fakePeers{readErr: fmt.Errorf("%w: read: timeout", registry.ErrUnreachable)}, own, ""},
		{"disagreeing peer", &fakePeers{hosts: []registry.Host{live("b", mine), live("c", "0123456789abcdef")}}, own, RefusedDivergence},
		{"junk fingerprint", &fakePeers{hosts: []registry.Host{live("b", registry.InvalidFingerprint)}}, own, RefusedDivergence},
		{"own unreadable with opinions", &fakePeers{hosts: []registry.Host{live("b", mine)}}, Own{Configured: true}, RefusedOwnUnreadable},
		{"own unreadable without opinions", &fakePeers{hosts: []registry.Host{live("b", "")}}, Own{Configured: true}, ""},
		{"cron disabled", &fakePeers{hosts: []registry.Host{live("b", mine)}}, Own{}, RefusedCronDisabled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &fakeStore{}
			gr, err := ReconcileGated(ctx, store, tt.peers, tt.own, set, Options{Host: "a", TZ: "UTC"})
			if err != nil {
				t.Fatalf("a gate decision returned an error: %v", err)
			}
			if gr.Refused != tt.refused {
				t.Fatalf("Refused = %q, want %q (%+v)", gr.Refused, tt.refused, gr)
			}
			if tt.refused != "" && len(store.calls) != 0 {
				t.Fatalf("a refusal touched the store: %v", store.calls)
			}
			if tt.refused == "" && !slices.Equal(store.calls, []string{"upsert nightly", "list"}) {
				t.Fatalf("store calls = %v, want an install and a list", store.calls)
			}
			if tt.refused != RefusedCronDisabled && !slices.Equal(tt.peers.calls, []string{"publish", "read"}) {
				t.Fatalf("registry calls = %v, want publish before read", tt.peers.calls)
			}
		})
	}

	// No registry at all proceeds; a store failure is the only error.
	store := &fakeStore{err: errors.New("valkey down")}
	if _, err := ReconcileGated(ctx, store, nil, own, set, Options{}); err == nil {
		t.Fatal("a store failure was not returned")
	}
}
