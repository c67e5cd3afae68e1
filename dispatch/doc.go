// Package dispatch runs queued, money-spending agent jobs: configuration from the
// environment, the job model, the gates a job passes before anything is spent, the
// Worker that composes queue, registry, leases and the container runtime through
// interfaces, and the run records it leaves behind.
//
// # Building blocks
//
// The parts in this file set need no Valkey and no Docker, so routing policy and
// configuration can be unit-tested on a laptop:
//
//   - [LoadConfig] parses every PI_* variable strictly. A bad value is a
//     [*ConfigError] naming the variable and the rule; all of them are reported
//     at once as [ConfigErrors], so an operator fixes a broken .env in one pass.
//     Passwords never appear in an error.
//   - [Job] is the job's public description as it travels in the queue's job data
//     (camelCase JSON, unknown fields refused). [LocalJobID] and [ChainJobID]
//     derive the deterministic ids the original derives, so a Go and a Node
//     producer deduplicate the same run; [LocalRunID] adds every other field
//     that changes what runs, so the same run on another image is a new job.
//   - [PauseWindows] and [ScopedLimits] are the two optional policy files.
//     Both parsers are strict: a misspelled key is an error naming the row and
//     the field, never a silently ignored limit.
//   - [ResolveSecrets] runs a secret profile's resolver. Secret values never appear
//     in an error, a log line or a record.
//   - [Record] and [WriteRecord] write the per-job run record atomically.
//
// # Errors
//
// Configuration errors are [*ConfigError] (one variable); document errors are
// [*FieldError] (one field of a job or policy file, as a path such as
// "windows[2].from"); resolver failures are [*SecretError]. All of them are
// errors.As-able and carry no secret.
//
// docs/architecture.md shows how the packages fit together and the order of
// the gates.
package dispatch
