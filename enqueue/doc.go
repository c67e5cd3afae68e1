// Package enqueue puts jobs on the fleet's queues: [Producer] adds local,
// chain and cron runs with their deterministic ids, and [Router] sends a
// forge delivery to a host whose capabilities can run it. It is what a
// front-end needs (see examples/webhook-frontend) and links no Docker code.
package enqueue
