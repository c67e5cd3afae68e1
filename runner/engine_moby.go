package runner

// The one file that speaks github.com/moby/moby: the engine interface adapted
// to the Docker Engine API. Everything else in the package is engine-neutral.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

// mobyAPI is the part of the Docker client the runner uses, and all of it.
type mobyAPI interface {
	ImageInspect(ctx context.Context, image string, opts ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ContainerCreate(ctx context.Context, opts client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerAttach(ctx context.Context, id string, opts client.ContainerAttachOptions) (client.ContainerAttachResult, error)
	ContainerWait(ctx context.Context, id string, opts client.ContainerWaitOptions) client.ContainerWaitResult
	ContainerStart(ctx context.Context, id string, opts client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerStop(ctx context.Context, id string, opts client.ContainerStopOptions) (client.ContainerStopResult, error)
	ContainerKill(ctx context.Context, id string, opts client.ContainerKillOptions) (client.ContainerKillResult, error)
	ContainerRemove(ctx context.Context, id string, opts client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerInspect(ctx context.Context, id string, opts client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ContainerList(ctx context.Context, opts client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerLogs(ctx context.Context, id string, opts client.ContainerLogsOptions) (client.ContainerLogsResult, error)
	ContainerStats(ctx context.Context, id string, opts client.ContainerStatsOptions) (client.ContainerStatsResult, error)
}

var (
	_ mobyAPI = (*client.Client)(nil)
	_ engine  = mobyEngine{}
)

// NewDocker returns a runtime on a Docker Engine API client (Docker, or an
// engine compatible with its API). The client is the caller's to close.
func NewDocker(c *client.Client, cfg Config) (*Docker, error) {
	if c == nil {
		return nil, errors.New("runner: nil docker client")
	}
	return newDocker(mobyEngine{api: c}, cfg)
}

type mobyEngine struct{ api mobyAPI }

// classify wraps an engine error with the runner's sentinel for it.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: %w", errNotFound, err)
	case cerrdefs.IsConflict(err):
		return fmt.Errorf("%w: %w", errNameInUse, err)
	}
	return err
}

func (e mobyEngine) imageID(ctx context.Context, ref string) (string, error) {
	img, err := e.api.ImageInspect(ctx, ref)
	if err != nil {
		return "", classify(err)
	}
	return img.ID, nil
}

func (e mobyEngine) create(ctx context.Context, cs containerSpec) (string, error) {
	pids := cs.PidsLimit
	initProcess := cs.Init
	var securityOpt []string
	if cs.NoNewPrivileges {
		securityOpt = append(securityOpt, "no-new-privileges")
	}
	mounts := make([]mount.Mount, 0, len(cs.Mounts))
	for _, m := range cs.Mounts {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	cgroupns := container.CgroupnsModeHost
	if cs.PrivateCgroupNS {
		cgroupns = container.CgroupnsModePrivate
	}
	// json-file whatever the daemon's default driver: a driver the daemon
	// chose (journald, a remote one) could keep all of a job's output.
	logConfig := container.LogConfig{Type: "json-file", Config: map[string]string{
		"max-size": strconv.FormatInt(cs.LogMax/2, 10), "max-file": "2",
	}}
	res, err := e.api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: cs.Name,
		Config: &container.Config{
			Image:        cs.Image,
			Env:          cs.Env,
			Labels:       cs.Labels,
			User:         cs.User,
			AttachStdout: true,
			AttachStderr: true,
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    container.NetworkMode(cs.Network),
			AutoRemove:     false,
			Privileged:     false,
			CapDrop:        cs.CapDrop,
			SecurityOpt:    securityOpt,
			ShmSize:        cs.ShmSize,
			Init:           &initProcess,
			Mounts:         mounts,
			ReadonlyRootfs: cs.ReadOnlyRoot,
			Tmpfs:          cs.Tmpfs,
			CgroupnsMode:   cgroupns,
			LogConfig:      logConfig,
			Resources: container.Resources{
				Memory:     cs.Memory,
				MemorySwap: cs.MemorySwap,
				NanoCPUs:   cs.NanoCPUs,
				PidsLimit:  &pids,
				Ulimits:    []*container.Ulimit{{Name: "nofile", Soft: cs.Nofile, Hard: cs.Nofile}},
			},
		},
	})
	if err != nil {
		return "", classify(err)
	}
	return res.ID, nil
}

func (e mobyEngine) attach(ctx context.Context, id string) (outputStream, error) {
	res, err := e.api.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, classify(err)
	}
	return mobyStream{res.HijackedResponse}, nil
}

// mobyStream is an attach connection. Without a TTY the engine multiplexes
// stdout and stderr into frames, which stdcopy separates.
type mobyStream struct{ h client.HijackedResponse }

func (s mobyStream) demux(stdout, stderr io.Writer) error {
	_, err := stdcopy.StdCopy(stdout, stderr, s.h.Reader)
	return err
}

func (s mobyStream) Close() error { return s.h.Conn.Close() }

func (e mobyEngine) wait(ctx context.Context, id string) <-chan waitResult {
	w := e.api.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	out := make(chan waitResult, 1)
	// The client's goroutine sends exactly one value on one of its channels;
	// this one forwards it, so both end once the wait resolves or ctx ends.
	go func() {
		select {
		case r := <-w.Result:
			if r.Error != nil && r.Error.Message != "" {
				out <- waitResult{ExitCode: -1, Err: errors.New(r.Error.Message)}
				return
			}
			out <- waitResult{ExitCode: r.StatusCode}
		case err := <-w.Error:
			out <- waitResult{ExitCode: -1, Err: classify(err)}
		}
	}()
	return out
}

func (e mobyEngine) start(ctx context.Context, id string) error {
	_, err := e.api.ContainerStart(ctx, id, client.ContainerStartOptions{})
	return classify(err)
}

func (e mobyEngine) stop(ctx context.Context, id string, grace time.Duration) error {
	secs := int(math.Ceil(grace.Seconds()))
	_, err := e.api.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &secs})
	return classify(err)
}

func (e mobyEngine) kill(ctx context.Context, id string) error {
	_, err := e.api.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"})
	return classify(err)
}

func (e mobyEngine) remove(ctx context.Context, id string) error {
	_, err := e.api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	return classify(err)
}

func (e mobyEngine) inspect(ctx context.Context, idOrName string) (containerInfo, error) {
	res, err := e.api.ContainerInspect(ctx, idOrName, client.ContainerInspectOptions{})
	if err != nil {
		return containerInfo{}, classify(err)
	}
	c := res.Container
	info := containerInfo{ID: c.ID, Name: strings.TrimPrefix(c.Name, "/")}
	if c.Config != nil {
		info.Labels = c.Config.Labels
	}
	if c.State != nil {
		info.Running = c.State.Running || c.State.Restarting || c.State.Paused
		info.ExitCode = c.State.ExitCode
		info.OOMKilled = c.State.OOMKilled
		info.Exited = c.State.Status == container.StateExited
	}
	return info, nil
}

// stdoutTail asks for the last n lines, which hold at least the last n
// bytes (each line ends in a newline), and keeps the last n bytes of them.
func (e mobyEngine) stdoutTail(ctx context.Context, id string, n int) ([]byte, error) {
	rc, err := e.api.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, Tail: strconv.Itoa(n)})
	if err != nil {
		return nil, classify(err)
	}
	defer rc.Close()
	tail := newTailBuffer(n)
	if _, err := stdcopy.StdCopy(tail, io.Discard, rc); err != nil {
		return nil, fmt.Errorf("read the log of container %s: %w", id, err)
	}
	return tail.Bytes(), nil
}

func (e mobyEngine) list(ctx context.Context, label, value string) ([]containerInfo, error) {
	res, err := e.api.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", label+"="+value),
	})
	if err != nil {
		return nil, classify(err)
	}
	out := make([]containerInfo, 0, len(res.Items))
	for _, c := range res.Items {
		info := containerInfo{ID: c.ID, Labels: c.Labels, Running: c.State == container.StateRunning}
		if len(c.Names) > 0 {
			info.Name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, info)
	}
	return out, nil
}

// usage reads the engine's stats stream: a sample about every second while
// the container runs. On cgroup v2 the engine reports no max_usage, so the
// peak is the highest current use a sample caught.
func (e mobyEngine) usage(ctx context.Context, id string, each func(usageSample)) error {
	res, err := e.api.ContainerStats(ctx, id, client.ContainerStatsOptions{Stream: true})
	if err != nil {
		return classify(err)
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var s container.StatsResponse
		if err := dec.Decode(&s); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read the stats of container %s: %w", id, err)
		}
		each(usageSample{MemoryBytes: max(s.MemoryStats.Usage, s.MemoryStats.MaxUsage), CPUNanos: s.CPUStats.CPUUsage.TotalUsage})
	}
}
