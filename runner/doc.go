// Package runner runs one job as one container and reports how it ended.
//
// It is the container contract of pidispatch (docs/container-contract.md) in
// code: the container is named pi-job-<sanitized job id> and labelled with
// the job and the owning worker; an image absent from the host refuses the
// job before anything is created (nothing is ever pulled); every container
// gets the same isolation, which a Spec cannot turn off; secrets travel in
// the API's Env field, never on a command line and never in a log; a timeout
// or a cancelled context stops the container with a grace period, then kills
// it, and the call returns either way; the container is always removed after
// its output and exit code are collected.
//
// The exit protocol is the job image's: 0 completed, 1 infrastructure failure,
// 2 policy refusal, 125-127 never started (Result.NeverStarted). The last JSON
// object with "event":"exit" in the final 8 KiB of stdout carries telemetry
// (ParseExitLine), also when a missing newline glued it to other output.
//
// Reap removes every container labelled as owned by a worker (the label, never
// a name prefix), for the worker's boot sweep.
//
// Docker (on github.com/moby/moby/client) is the one implementation. The
// engine calls it needs are a small interface inside this package, adapted to
// moby in one file (engine_moby.go), so a Podman-compatible or remote engine
// can be added beside it.
package runner
