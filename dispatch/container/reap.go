package container

// ReapReport is what a Reap found and did.
type ReapReport struct {
	// Enumerated: the engine listed this worker's containers. Only then does
	// the report say anything about what remains.
	Enumerated bool
	// Found is how many containers carried the worker's label; Removed how
	// many of them are gone now.
	Found, Removed int
	// Errors holds one error per container that could not be removed.
	Errors []error
	// Exited lists the containers found exited, with their exit codes, read
	// before they were removed: a worker that crashed after its job's
	// container ended records the real outcome from it.
	Exited []ExitedJob
}

// ExitedJob is a job container Reap found exited.
type ExitedJob struct {
	JobID     string // the job label of the container
	Container string
	ExitCode  int
	OOMKilled bool
	// Stdout is the end of the container's stdout (at most
	// TelemetryScanBytes) from the engine's own log, nil when the engine
	// keeps none: a worker killed mid-run copied its output only up to the
	// kill, and the exit line the job printed afterwards is only here.
	Stdout []byte
}

// Clean reports whether the sweep proved this worker holds no containers:
// it enumerated them and removed every one.
func (r ReapReport) Clean() bool { return r.Enumerated && r.Removed == r.Found && len(r.Errors) == 0 }
