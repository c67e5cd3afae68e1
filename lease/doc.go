// Package lease bounds work across a fleet with N independent slot keys on
// Valkey: the wait-check bound (wait:check:<i>) and a scope's concurrency bound
// (slot:s:<hash16>:<i>).
//
// # Protocol
//
// A slot is a STRING key set with SET NX PX to the holder value
// "<worker>#<id>". The worker-name alphabet has no '#', so a holder splits
// unambiguously and a worker can recognise its own claims. Acquire is one
// script that probes every slot, starting at a hash of the id and wrapping, and
// takes the first free one; if all are held it grants nothing. Release and
// Refresh act only on a key whose value is still the holder's, so a double
// release never frees another holder's slot and a refresh after the slot
// expired and was taken reports the loss.
//
// N keys rather than one counter: a lost release (a crash) costs one slot for
// one TTL, never the whole semaphore, and a counter's single TTL would drop
// every claim at once.
//
// TTLs are set by the server (PX); the local clock is never read.
//
// # Failing open
//
// A Valkey fault grants: Acquire returns a Handle marked Degraded, and logs
// fleet_lease_unavailable once per transition (fleet_lease_restored on
// recovery). Callers keep their in-process bound, so a fault degrades the
// fleet-wide bound to the per-host one, never to a wedged fleet.
//
// # Boot sweep
//
// SweepOwnClaims deletes this worker's scope claims at boot, after the
// container reaper has proven (by enumerating) that this host runs no job
// containers, so every claim naming this worker is a claim for a container that
// no longer exists. Without that proof it does nothing.
package lease
