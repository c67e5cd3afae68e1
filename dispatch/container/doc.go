// Package container describes a job's container without running one: the
// Spec a worker asks for, the Result it gets back, the exit line's
// Telemetry, and what a boot sweep found. The runner package runs these on
// Docker; the worker and its fakes need nothing else, so neither links
// Docker code.
package container
