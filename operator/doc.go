// Package operator holds what an operator does to a running fleet, as the
// pi-dispatch commands do it: the kill switch ([Pause], [Resume]), [Status]
// and [Hosts], [Cancel] of a queued or running job, [Doctor]'s checks of
// a host, [Explain] (what holds one job) and [Runs] (the fleet's recent
// runs). Each works on one Valkey client and changes nothing it cannot
// report.
package operator
