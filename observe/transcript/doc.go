// Package transcript keeps what each attempt of a job printed, and reads it
// back for people.
//
// While a job's container runs, a Store follows the output file the runtime
// writes (container.Spec.OutputFile), line by line. Every line is redacted
// (each value the job's secrets profile resolved and each provider key the
// host holds, also in its JSON-escaped form) before it goes anywhere: into a
// gzip file beside the run record (<stem>.attempt-<n>.transcript.jsonl.gz),
// bounded in size, and into a capped Valkey stream (fleetstate.RunLiveKey)
// that `pi-dispatch logs --follow` and the dashboard read from any host. The
// gateway's model calls (provider, model, tokens, cost) are added as entries
// of their own.
//
// Read, Attempts and Render read a stored transcript back; Follow reads the
// live stream. Everything read is re-validated and bounded: a transcript
// holds what an untrusted job printed.
package transcript
