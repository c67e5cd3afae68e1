package registry

// Every Valkey key this package touches is formatted here and nowhere else, so
// a later change of layout (a hash tag for Valkey Cluster) is one file.

// LiveKey is the SET of names of hosts that beat. A SET cannot expire its
// members, so readers prune a member whose row is gone.
const LiveKey = "host:live"

// rowKeyPrefix is HostKey without its name, for the read script, which walks
// the members of LiveKey on the server.
const rowKeyPrefix = "host:h:"

// HostKey is one host's row: a HASH of the row fields, with a TTL refreshed on
// every beat.
func HostKey(name string) string { return rowKeyPrefix + name }

// ClaimKey holds the instance that owns a worker name (the duplicate-name
// guard): a small JSON value with the same TTL as the row.
func ClaimKey(name string) string { return "host:id:" + name }
