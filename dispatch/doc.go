// Package dispatch runs queued, money-spending agent jobs: the gates a job
// passes before anything is spent, and the
// Worker that composes queues, registry, leases, spend caps, holds, the run
// mirror and the container runtime through interfaces written in this
// package's own terms (deps.go, held.go). It links no Valkey and no Docker
// code: package stack wires the real implementations, and package
// dispatchtest has in-memory ones for tests.
//
// # Building blocks
//
//   - [Config] is what the Worker needs to know, typed and file-free. Package
//     config builds it from the environment (config.Load, then
//     config.Config.Worker, which also parses the policy files of package
//     policy); a program may build it in code from [DefaultConfig].
//   - [NewWorker] checks that the collaborators fit the configuration (a
//     configuration that lets waitFor jobs in needs a HoldStore) and
//     [Worker.Run] runs until its context ends. It opens no file.
//   - A job's secrets come from its profile's resolver through
//     [SecretResolver] (package secretprofile), and its model socket from
//     [ModelSockets] (package gateway/socket); package stack wires both. Secret
//     values never appear in an error, a log line or a record.
//
// The job model, its ids and the run records are package jobs; the enqueue
// side is package enqueue; the operator's commands are package operator.
// The Worker leans on small packages with one job each: hold (the rules of
// holding a job on its waitFor conditions) and waitcheck (a profile's check
// run), runclass (what a finished run was), exitline (the exit line a record
// keeps), jobdir (the held note beside a job folder) and hostfolder (a job's
// folders and user on this host).
//
// # Errors
//
// Configuration errors are [*ConfigError] (one setting); document errors are
// jobs.FieldError (one field of a job or policy file, as a path such as
// "windows[2].from"); resolver failures are secretprofile.Error. All of them are
// errors.As-able and carry no secret.
//
// docs/architecture.md shows how the packages fit together and the order of
// the gates.
package dispatch
