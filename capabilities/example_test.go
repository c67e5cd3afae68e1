package capabilities_test

import (
	"fmt"
	"time"

	"github.com/pidispatch/pidispatch/capabilities"
)

// A host publishes what it can serve; a front-end reads a job's needs from its trigger.
func ExampleTokens() {
	published := capabilities.Serialize(capabilities.Tokens(
		[]string{"prod", "bad name"}, // PI_SECRET_PROFILES names; invalid ones are dropped
		[]string{"jira", "ci.v2"},    // PI_WAIT_PROFILES names
	))
	fmt.Println(published)
	fmt.Println(capabilities.Parse(published + ",junk,s:prod").Sorted())
	// Output:
	// s:prod,w:ci.v2,w:jira
	// [s:prod w:ci.v2 w:jira]
}

func ExampleNeeds() {
	fmt.Println(capabilities.Needs("prod", []string{"jira", "jira", ""}))
	// Output: [s:prod w:jira]
}

// Route sends a job to a host that can serve it only when some live host cannot; otherwise it
// leaves the job on the shared queue ("").
func ExampleRoute() {
	hosts := []capabilities.Host{
		{Name: "mac-studio", Caps: "s:prod,w:ci", Routes: true, Age: 2 * time.Second, AgeKnown: true},
		{Name: "mini1", Caps: "s:prod", Routes: true, Age: time.Second, AgeKnown: true},
		{Name: "mini2", Caps: "w:jira", Routes: true, Age: 500 * time.Millisecond, AgeKnown: true},
		{Name: "old", Caps: "s:prod", Routes: true, Age: time.Minute, AgeKnown: true}, // stale: not live
	}
	fresh := capabilities.RouteFresh
	fmt.Printf("%q\n", capabilities.Route(hosts, []string{"w:ci"}, "gh-1234-r1", fresh))
	fmt.Printf("%q\n", capabilities.Route(hosts, []string{"s:prod"}, "gh-1234-r1", fresh))
	fmt.Printf("%q\n", capabilities.Route(hosts, []string{"s:prod"}, "gh-1234-r2", fresh))
	fmt.Printf("%q\n", capabilities.Route(hosts, nil, "gh-1234-r1", fresh))                // needs nothing
	fmt.Printf("%q\n", capabilities.Route(hosts, []string{"s:nope"}, "gh-1234-r1", fresh)) // nobody can
	// Output:
	// "mac-studio"
	// "mini1"
	// "mac-studio"
	// ""
	// ""
}
