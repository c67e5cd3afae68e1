// Package registry is the fleet's host registry on Valkey: each worker publishes
// a small row about itself every 15 seconds, and anyone can read every live row
// in one round trip. It also owns the worker-name rules.
//
// # Protocol
//
// A beat is one Lua script: it refreshes the name claim (host:id:<name>), then
// replaces the row (host:h:<name>) with HSET, stamps beatAt with the server's
// TIME, sets the row's TTL (90 s, six missed beats) and adds the name to
// host:live. Because it is one script there is no state in which a row exists
// without a TTL, which the original's three separate commands allowed.
//
// Readers compute a row's age against the server's TIME in the same script that
// reads the rows, so no host's wall clock enters liveness. The reader prunes
// members of host:live whose row has expired and re-validates every row in Go:
// a row was written by another process and decides where paid work goes.
//
// Every call is bounded (2 s by default) and fails open. Unreachability is
// logged once per transition (host_registry_unreachable, host_registry_restored).
// A read distinguishes "unreachable" ([ErrUnreachable]) from "no hosts" (an
// empty slice): callers decide differently on the two.
//
// # Duplicate names
//
// Each Registry has a random instance id. Its first beat claims host:id:<name>
// with SET NX; a live holder on another machine makes Start fail with a
// [*NameInUseError]. A holder on this machine whose pid is no longer running is
// a crashed predecessor, and its claim is taken over at once so a supervisor's
// restart is never refused. A crashed holder elsewhere frees the name when its
// claim expires, one TTL after its last beat.
//
// # Content rule
//
// A row value is a name, an integer, a digest or an IANA zone: never a path, a
// URL, a repository name or free text. The writer publishes a value that breaks
// the rule as empty and logs host_registry_field_refused once per field and
// value, naming the field and the rule but never the value.
package registry
