package runner

import (
	"context"
	"errors"
	"io"
	"time"
)

// engine is the container engine as the runner needs it, in the runner's own
// terms. engine_moby.go adapts the Docker Engine API; a Podman-compatible or
// remote engine would be another adapter. API is not stable.
type engine interface {
	// imageID resolves a local image reference to its ID; errNotFound when the
	// image is not on the host. It never pulls.
	imageID(ctx context.Context, ref string) (string, error)
	// create creates (does not start) a container; errNameInUse when the name
	// is taken, errNotFound when the image vanished.
	create(ctx context.Context, spec containerSpec) (id string, err error)
	// attach connects to the container's stdout and stderr before it starts.
	attach(ctx context.Context, id string) (outputStream, error)
	// wait registers for the container's next exit; it must be called before
	// start. The channel yields exactly one value; cancelling ctx makes it
	// yield promptly (with an error) and lets the engine's goroutines end.
	wait(ctx context.Context, id string) <-chan waitResult
	start(ctx context.Context, id string) error
	// stop sends the stop signal, waits up to grace, then kills.
	stop(ctx context.Context, id string, grace time.Duration) error
	kill(ctx context.Context, id string) error
	// remove force-removes the container and its anonymous volumes;
	// errNotFound when it is already gone.
	remove(ctx context.Context, id string) error
	// inspect reads one container by ID or name; errNotFound when absent.
	inspect(ctx context.Context, idOrName string) (containerInfo, error)
	// list returns containers in every state that carry label=value.
	list(ctx context.Context, label, value string) ([]containerInfo, error)
	// stdoutTail returns at most the last n bytes of a container's stdout
	// as the engine logged it.
	stdoutTail(ctx context.Context, id string, n int) ([]byte, error)
	// usage streams a running container's resource samples to each until
	// the container ends or ctx does; it returns once it stopped calling each.
	usage(ctx context.Context, id string, each func(usageSample)) error
}

// usageSample is one reading of a container's resource use.
type usageSample struct {
	// MemoryBytes is the highest memory use the reading shows: the
	// cgroup's recorded maximum where the engine reports one (cgroup v1),
	// else its current use.
	MemoryBytes uint64
	// CPUNanos is the CPU time the container used so far.
	CPUNanos uint64
}

// Errors an engine classifies its failures into (wrapping the engine's own).
var (
	errNotFound  = errors.New("not found")
	errNameInUse = errors.New("container name in use")
)

// containerSpec is one container as the runner asks for it. The isolation
// fields are always filled by the runner from fixed values (see isolation);
// an adapter maps every field and adds nothing that loosens them.
type containerSpec struct {
	Name    string
	Image   string // an image ID, so the container runs exactly what was checked
	Env     []string
	Labels  map[string]string
	Mounts  []bindMount
	Network string // "" is the engine's default network
	User    string // "UID[:GID]"; "" is the image's USER

	Memory   int64
	NanoCPUs int64

	CapDrop         []string
	NoNewPrivileges bool
	PidsLimit       int64
	Init            bool
	ShmSize         int64
	ReadOnlyRoot    bool
	Tmpfs           map[string]string // mount point to mount options
	MemorySwap      int64             // memory plus swap
	Nofile          int64             // soft and hard open-files limit
	PrivateCgroupNS bool
	LogMax          int64 // bytes of the engine's own log of the container, all files together
}

type bindMount struct {
	Source   string
	Target   string
	ReadOnly bool
}

type containerInfo struct {
	ID        string
	Name      string // without the leading '/'
	Labels    map[string]string
	Running   bool
	Exited    bool // it ran and ended (inspect only): ExitCode is its own
	ExitCode  int
	OOMKilled bool
}

type waitResult struct {
	ExitCode int64
	Err      error
}

// outputStream is an attached container's output.
type outputStream interface {
	// demux copies stdout and stderr to their writers until the stream ends.
	demux(stdout, stderr io.Writer) error
	// Close ends the stream, unblocking demux.
	io.Closer
}
