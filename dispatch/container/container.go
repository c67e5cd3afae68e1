package container

import (
	"errors"
	"time"
)

// The refusals of a runtime's Run; nothing was created.
var (
	// ErrImageMissing refuses a job whose image is not on this host. Nothing
	// is pulled and no container is created.
	ErrImageMissing = errors.New("job image missing")
	// ErrInvalidSpec refuses a Spec that names no job or worker, asks to share
	// the host's network, or carries values no engine could pass on (NUL
	// bytes, invalid UTF-8, reserved labels). Nothing is created.
	ErrInvalidSpec = errors.New("invalid job spec")
	// ErrNameConflict refuses a job whose container name is taken by a
	// container this worker does not own; that container is left alone.
	ErrNameConflict = errors.New("container name held by a container of another owner")
)

// Spec is one job's container.
type Spec struct {
	// JobID names the job: the runtime names and labels the container by it. Required.
	JobID string
	// Worker is the owning worker's name, which the runtime labels the container with and
	// Reap finds it by. Required.
	Worker string
	// Image is a local image reference (tag or ID). Never pulled.
	Image string
	// Env is the job's environment, secrets included. It travels in the
	// engine API's Env field only: never on a command line, never logged.
	Env map[string]string
	// JobDir, when set, is an absolute host folder mounted read-only at /job.
	JobDir string
	// WorkspaceDir, when set, is an absolute host folder mounted read-write
	// at /workspace.
	WorkspaceDir string
	// OutDir, when set, is an absolute host folder mounted read-write at
	// /job/out, inside the read-only /job: the one place under /job the job
	// may write, for what it hands back to the host (a pull request's
	// title and body, say), which the host reads and checks after the run.
	// It needs JobDir, in which the runtime makes the mount point (an
	// empty folder "out") when it is missing, and may not be JobDir or a
	// folder that holds it. Empty: none.
	OutDir string
	// SessionDir, when set, is an absolute host folder mounted read-write at
	// /session: the agent's session of the job's thread, which the host
	// keeps between the thread's jobs, outside the workspace (never in a
	// commit). Empty: none.
	SessionDir string
	// ModelSocketDir, when set, is an absolute host folder mounted read-only
	// at /run/pidispatch: the folder of the job's model socket.
	ModelSocketDir string
	// Memory limit in bytes; zero means the runtime's default.
	Memory int64
	// CPUs limit; zero means the runtime's default.
	CPUs float64
	// Network is the network to join: empty is the engine's default bridge,
	// "none" isolates, any other name is a user network. "host" and
	// "container:<id>" are refused.
	Network string
	// Timeout bounds the run; zero means the runtime's default.
	Timeout time.Duration
	// Labels are extra container labels; they may not set the job or worker labels.
	Labels map[string]string
	// User is the user the job's process runs as, "UID" or "UID:GID" in
	// numbers; empty keeps the image's own USER. A job that writes a host
	// folder runs as the folder's owner: with every capability dropped, a
	// root process cannot write a folder another uid owns.
	User string
	// OutputFile, when set, receives the job's whole output (stdout and
	// stderr as they interleaved), created with mode 0600. The runtime
	// bounds its size and keeps the tail, which ends with the exit line.
	OutputFile string
	// KeepContainer leaves the container in place once it exited, so a
	// caller that crashes before recording the outcome leaves the exit code
	// for Reap to report (ReapReport.Exited); the caller removes it with
	// the runtime once the outcome is recorded. A container that never
	// started is removed all the same.
	KeepContainer bool
}

// Result is how a job's container ended. Run always fills it, also when it
// returns an error.
type Result struct {
	// Container is the container's name.
	Container string
	// ImageID is the ID of the image the container ran (empty if the image
	// was not resolved).
	ImageID string
	// ExitCode is the container's exit status; -1 when none is known.
	ExitCode int
	// StartedAt is when the start was requested (zero if it never was);
	// EndedAt is when its exit was observed, or the run gave up.
	StartedAt, EndedAt time.Time
	// TimedOut: the job outlived its timeout and was stopped.
	TimedOut bool
	// Cancelled: the caller's context ended the job, which was stopped.
	Cancelled bool
	// NeverStarted: the job's own program never ran, so nothing it could
	// spend was spent. True when Run refused or failed before the start,
	// when the engine refused to start the container (StartError says why),
	// or when the container exited 125, 126 or 127 (the contract's codes for
	// an entrypoint that could not be run).
	NeverStarted bool
	// StartError is the engine's refusal to start the container, if any.
	StartError string
	// OOMKilled: the engine reports the job was killed for exceeding its
	// memory limit.
	OOMKilled bool
	// PeakMemoryBytes and CPUTime are what the runtime saw the container
	// use while it ran: its highest memory use and its CPU time, as of the
	// engine's last reading before the exit. Zero when it read nothing (the
	// engine gave no reading, or the container ended before the first).
	PeakMemoryBytes int64
	CPUTime         time.Duration
	// Telemetry is the job's exit line, nil when it printed none.
	Telemetry *Telemetry
	// Tail is the end of the job's combined output (the runtime bounds it), and
	// TailTruncated says whether more came before it.
	Tail          []byte
	TailTruncated bool
}
