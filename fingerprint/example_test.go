package fingerprint_test

import (
	"encoding/json"
	"fmt"

	"github.com/pidispatch/pidispatch/fingerprint"
)

// Key order, whitespace and number spelling do not change the canonical form; content does.
func ExampleCanonical() {
	text, err := fingerprint.Canonical(json.RawMessage(`{"b": 1.0, "a": ["<ok>", 1e21, 0.0000001]}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(text))
	// Output: {"a":["<ok>",1e+21,1e-7],"b":1}
}

func ExampleOf() {
	a, _ := fingerprint.Of(json.RawMessage(`{"b":1,"a":2}`))
	b, _ := fingerprint.Of(map[string]any{"a": 2, "b": 1})
	fmt.Println(a, a == b)
	// Output: d3626ac30a87e6f7 true
}

// Two hosts publish Cron's result; they agree exactly when their authored cron sets and time
// zones are equal. A host with cron disabled publishes an empty fingerprint instead.
func ExampleCron() {
	fp, err := fingerprint.Cron([]fingerprint.CronEntry{{
		SchedulerID: "nightly",
		Pattern:     "0 3 * * *",
		Run:         json.RawMessage(`{"kind":"local","folder":"/srv/app","flow":"fix","task":"t"}`),
	}}, "Europe/Amsterdam")
	if err != nil {
		panic(err)
	}
	fmt.Println(fp)
	// Output: c84215d8379fd44c
}
