// Package dispatch runs queued, money-spending agent jobs: configuration from
// the environment, the gates a job passes before anything is spent, and the
// Worker that composes queues, registry, leases, spend caps, holds, the run
// mirror and the container runtime through interfaces written in this
// package's own terms (deps.go, held.go). It links no Valkey and no Docker
// code: package stack wires the real implementations, and package
// dispatchtest has in-memory ones for tests.
//
// # Building blocks
//
//   - [LoadConfig] parses every PI_* variable strictly. A bad value is a
//     [*ConfigError] naming the variable and the rule; all of them are reported
//     at once as [ConfigErrors], so an operator fixes a broken .env in one pass.
//     Passwords never appear in an error.
//   - [NewWorker] checks that the collaborators fit the configuration (a
//     configuration that lets waitFor jobs in needs a HoldStore) and
//     [Worker.Run] runs until its context ends.
//   - [PauseWindows] and [ScopedLimits] are the two optional policy files.
//     Both parsers are strict: a misspelled key is an error naming the row and
//     the field, never a silently ignored limit.
//   - A job's secrets come from its profile's resolver through
//     [SecretResolver] (package secretprofile), and its model socket from
//     [ModelSockets] (package modelsocket); package stack wires both. Secret
//     values never appear in an error, a log line or a record.
//
// The job model, its ids and the run records are package jobs; the enqueue
// side is package enqueue; the operator's commands are package operator.
//
// # Errors
//
// Configuration errors are [*ConfigError] (one variable); document errors are
// jobs.FieldError (one field of a job or policy file, as a path such as
// "windows[2].from"); resolver failures are secretprofile.Error. All of them are
// errors.As-able and carry no secret.
//
// docs/architecture.md shows how the packages fit together and the order of
// the gates.
package dispatch
