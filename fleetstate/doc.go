// Package fleetstate keeps the state a fleet's workers share in Valkey,
// beside the queues: the spend caps (Budget, counts of container starts, and
// Dollars, the dollar windows), the providers' rate-limit suspensions
// (RateLimits), the holds of jobs waiting on
// their conditions (Holds), the run mirror and its per-attempt record claim
// (Mirror), and operator cancel requests (CancelWatcher). Each implements an
// interface the dispatch.Worker consumes. Every key these stores use is
// formatted in keys.go.
package fleetstate
