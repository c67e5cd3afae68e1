// Package fleet holds the names every host of a fleet must agree on, with no
// I/O: worker names, the job id rule, and the keys of fleet-wide slots. The
// queue, the registry, the leases and the worker all apply these one rules,
// so a name one host accepts is never refused by another. It also makes the
// job lock tokens every consumer of the queue uses, and holds the fleet's
// signing key (Key, LoadKey), with which jobs and registry rows are signed.
package fleet
