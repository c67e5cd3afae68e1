package dispatch

import (
	"context"
	"maps"
	"slices"
)

// Transcripts keeps what each attempt's container printed: redacted, bounded
// and stored beside its record, and shown live while it runs. Package
// transcript implements it; nil keeps none.
type Transcripts interface {
	// Keep starts following one attempt's output. The returned keeper's
	// Close is called once the container has ended, before the record is
	// written.
	Keep(ctx context.Context, run TranscriptRun) TranscriptKeeper
}

// TranscriptKeeper follows one attempt's output until Close.
type TranscriptKeeper interface {
	// Close reads the rest of the output and stores the transcript. It
	// returns when the transcript is stored or given up.
	Close() error
}

// TranscriptRun is one attempt whose output is kept.
type TranscriptRun struct {
	JobID   string
	Attempt int
	// Host is this worker's name.
	Host string
	// OutputFile is the file the runtime writes the container's output to
	// (container.Spec.OutputFile); empty when the runtime writes none.
	OutputFile string
	// Redact are the values never to write anywhere: every value the job's
	// secrets profile resolved and every provider key the host holds.
	Redact []string
}

// keepTranscript starts keeping the attempt's output, when a Transcripts is
// wired and the runtime writes the output to a file.
func (w *Worker) keepTranscript(ctx context.Context, h *held, outputFile string) (stop func()) {
	if w.deps.Transcripts == nil || outputFile == "" {
		return func() {}
	}
	redact := slices.Collect(maps.Values(h.secrets))
	redact = append(redact, slices.Collect(maps.Values(w.cfg.Gateway.ProviderKeys))...)
	k := w.deps.Transcripts.Keep(ctx, TranscriptRun{
		JobID: h.job.ID, Attempt: h.rec.Attempt, Host: w.cfg.WorkerName, OutputFile: outputFile, Redact: redact,
	})
	return func() {
		if err := k.Close(); err != nil {
			h.log.Warn("transcript_failed", "err", err)
		}
	}
}
