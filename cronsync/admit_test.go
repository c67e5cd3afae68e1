package cronsync

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/pidispatch/pidispatch/registry"
)

func TestLiveSetAgreed(t *testing.T) {
	set := mustParse(t, triggersFile(cronTrigger{id: "nightly", pattern: "0 3 * * *", folder: "/srv/a"}))
	run := JobData(set[0])
	// The same run, keys reordered and spaced: what a queue may hand back.
	var m map[string]any
	if err := json.Unmarshal(run, &m); err != nil {
		t.Fatal(err)
	}
	respaced, _ := json.MarshalIndent(m, "", "  ")
	edited := mustParse(t, triggersFile(cronTrigger{id: "nightly", pattern: "0 3 * * *", folder: "/srv/b"}))

	tests := []struct {
		name   string
		own    Own
		id     string
		data   json.RawMessage
		ok     bool
		reason string
	}{
		{"named run", Own{Configured: true, Entries: set}, "nightly", run, true, ""},
		{"same JSON", Own{Configured: true, Entries: set}, "nightly", respaced, true, ""},
		{"cron disabled", Own{}, "nightly", run, false, NotAgreedCronDisabled},
		{"file never read", Own{Configured: true}, "nightly", run, false, NotAgreedOwnUnreadable},
		{"empty set", Own{Configured: true, Entries: []Entry{}}, "nightly", run, false, NotAgreedNotInSet},
		{"other id", Own{Configured: true, Entries: set}, "weekly", run, false, NotAgreedNotInSet},
		{"edited run", Own{Configured: true, Entries: edited}, "nightly", run, false, NotAgreedRunDiffers},
		{"junk data", Own{Configured: true, Entries: set}, "nightly", json.RawMessage(`{`), false, NotAgreedRunDiffers},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, reason := NewLiveSet(tt.own, "UTC").Agreed(tt.id, tt.data)
			if ok != tt.ok || reason != tt.reason {
				t.Fatalf("Agreed = %v %q, want %v %q", ok, reason, tt.ok, tt.reason)
			}
		})
	}
}

func TestAdmitRun(t *testing.T) {
	ctx := context.Background()
	set := mustParse(t, triggersFile(cronTrigger{id: "nightly", pattern: "0 3 * * *", folder: "/srv/a"}))
	run := JobData(set[0])
	mine, err := Fingerprint(set, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	agreeing := NewLiveSet(Own{Configured: true, Entries: set}, "UTC")
	abstaining := NewLiveSet(Own{}, "UTC")
	other := NewLiveSet(Own{Configured: true, Entries: []Entry{}}, "UTC")
	otherFP, _ := other.FPCron()
	live := func(name, fp string) registry.Host {
		return registry.Host{Name: name, FPCron: fp, AgeKnown: true}
	}
	tests := []struct {
		name   string
		live   *LiveSet
		peers  Peers
		shared bool
		want   RunDecision
	}{
		{"agreed on the host queue", agreeing, nil, false, RunDecision{Run: true}},
		{"agreed on the shared queue", agreeing, &fakePeers{}, true, RunDecision{Run: true}},
		{"disabled, host queue", abstaining, &fakePeers{hosts: []registry.Host{live("b", mine)}}, false,
			RunDecision{Reason: NotAgreedCronDisabled}},
		{"disabled, shared, a peer with an opinion", abstaining, &fakePeers{hosts: []registry.Host{live("b", mine)}}, true,
			RunDecision{Leave: true, Reason: NotAgreedCronDisabled}},
		{"disabled, shared, only abstainers", abstaining, &fakePeers{hosts: []registry.Host{live("b", "")}}, true,
			RunDecision{Reason: NotAgreedCronDisabled}},
		{"disabled, shared, peer not live", abstaining, &fakePeers{hosts: []registry.Host{{Name: "b", FPCron: mine}}}, true,
			RunDecision{Reason: NotAgreedCronDisabled}},
		{"disabled, shared, no registry", abstaining, nil, true, RunDecision{Reason: NotAgreedCronDisabled}},
		{"disabled, shared, registry unreadable", abstaining, &fakePeers{readErr: fmt.Errorf("%w: timeout", registry.ErrUnreachable)}, true,
			RunDecision{Leave: true, Reason: NotAgreedCronDisabled}},
		{"not in set, shared, peers agree with me", other, &fakePeers{hosts: []registry.Host{live("b", otherFP)}}, true,
			RunDecision{Reason: NotAgreedNotInSet}},
		{"not in set, shared, a peer differs", other, &fakePeers{hosts: []registry.Host{live("b", otherFP), live("c", mine)}}, true,
			RunDecision{Leave: true, Reason: NotAgreedNotInSet}},
		{"own row is not a peer", other, &fakePeers{hosts: []registry.Host{live("a", mine)}}, true,
			RunDecision{Reason: NotAgreedNotInSet}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AdmitRun(ctx, tt.live, tt.peers, tt.shared, "a", "nightly", run)
			if got != tt.want {
				t.Fatalf("AdmitRun = %+v, want %+v", got, tt.want)
			}
		})
	}
}
