package routingpolicy_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/capabilities"
)

// fleet is this deployment as the registry would show it: two production
// hosts that hold the prod secrets, a staging host, and a build box that
// declares no name (it drains only the shared queue). Every host can check
// the CI wait condition.
func fleet() []capabilities.Host {
	host := func(name string, routes bool, secrets ...string) capabilities.Host {
		caps := capabilities.Serialize(capabilities.Tokens(secrets, []string{"ci-green"}))
		return capabilities.Host{Name: name, Caps: caps, Routes: routes, Age: 5 * time.Second, AgeKnown: true}
	}
	return []capabilities.Host{
		host("prod-a", true, "prod", "staging"),
		host("prod-b", true, "prod", "staging"),
		host("staging-1", true, "staging"),
		host("buildbox", false),
	}
}

// route is what a front-end does for one delivery.
func route(hosts []capabilities.Host, jobID, secretsProfile string, waitProfiles ...string) string {
	return capabilities.Route(hosts, capabilities.Needs(secretsProfile, waitProfiles), jobID, capabilities.RouteFresh)
}

func jobIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("gh-delivery-%d", i)
	}
	return ids
}

func TestPolicy_ProdSecretsGoToProdHostsOnly(t *testing.T) {
	seen := map[string]int{}
	for _, id := range jobIDs(200) {
		seen[route(fleet(), id, "prod")]++
	}
	if len(seen) != 2 || seen["prod-a"] == 0 || seen["prod-b"] == 0 {
		t.Fatalf("prod jobs went to %v, want prod-a and prod-b (both used)", seen)
	}
}

func TestPolicy_StagingSecretsStayOffTheBuildBox(t *testing.T) {
	// prod-a, prod-b and staging-1 hold staging; the build box does not, so
	// the job must not sit on the shared queue where the build box could take
	// (and refuse) it.
	for _, id := range jobIDs(50) {
		got := route(fleet(), id, "staging")
		if !slices.Contains([]string{"prod-a", "prod-b", "staging-1"}, got) {
			t.Fatalf("%s routed to %q", id, got)
		}
	}
}

func TestPolicy_WhatEveryHostServesUsesTheSharedQueue(t *testing.T) {
	for _, id := range jobIDs(50) {
		if got := route(fleet(), id, "", "ci-green"); got != "" {
			t.Fatalf("%s needs only what every host has, routed to %q", id, got)
		}
		if got := route(fleet(), id, ""); got != "" {
			t.Fatalf("%s needs nothing, routed to %q", id, got)
		}
	}
}

func TestPolicy_AStaleHostGetsNothing(t *testing.T) {
	hosts := fleet()
	hosts[0].Age = 2 * time.Minute // prod-a stopped beating
	for _, id := range jobIDs(100) {
		if got := route(hosts, id, "prod"); got != "prod-b" {
			t.Fatalf("%s routed to %q with prod-a stale", id, got)
		}
	}
	hosts[1].AgeKnown = false // prod-b's row cannot be dated: no evidence of life
	for _, id := range jobIDs(20) {
		// No live host can serve it: the shared queue, where the worker's
		// own refusal (secret-profile-unknown) records it honestly.
		if got := route(hosts, id, "prod"); got != "" {
			t.Fatalf("%s routed to %q with no live prod host", id, got)
		}
	}
}

func TestPolicy_AHostWithoutAQueueIsNeverChosen(t *testing.T) {
	hosts := fleet()
	hosts[3].Caps = capabilities.Serialize([]string{"s:gpu"}) // only the build box has a GPU
	for _, id := range jobIDs(20) {
		if got := route(hosts, id, "gpu"); got != "" {
			t.Fatalf("%s routed to %q, a host that drains no queue of its own", id, got)
		}
	}
}

func TestPolicy_TheSameJobAlwaysGoesToTheSameHost(t *testing.T) {
	// A redelivered webhook must land where the first copy did, whatever
	// order the registry listed the hosts in.
	for _, id := range jobIDs(50) {
		first := route(fleet(), id, "prod")
		reversed := fleet()
		slices.Reverse(reversed)
		for range 3 {
			if got := route(fleet(), id, "prod"); got != first {
				t.Fatalf("%s: %q then %q", id, first, got)
			}
		}
		if got := route(reversed, id, "prod"); got != first {
			t.Fatalf("%s: %q, or %q with the hosts listed in reverse", id, first, got)
		}
	}
}
