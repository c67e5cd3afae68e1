// Package dash is a read-only web dashboard of a fleet: its hosts, queues,
// held and running jobs, recent runs with their cost, and the spend windows.
//
// New returns an http.Handler serving one page, embedded in the binary (no
// build step, nothing fetched from elsewhere: the Content-Security-Policy
// forbids it), that reads a JSON endpoint every few seconds and renders it
// as text, never as markup. The data comes from a Source; Valkey is the one
// over a fleet's Valkey, built from the operator, fleetstate, registry and
// queue readers. Pause, Resume and Cancel are offered only when Options
// names Actions: each asks the browser for a confirmation and posts with a
// per-process token embedded in the page. `pi-dispatch dash` serves it; see
// docs/dashboard.md.
package dash
