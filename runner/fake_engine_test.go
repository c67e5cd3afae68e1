package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"
)

// fakeEngine is an in-memory engine for the runner's logic: containers that
// print canned output, exit after a delay (or only when stopped), and record
// every call.
type fakeEngine struct {
	mu         sync.Mutex
	images     map[string]string // ref -> ID
	containers map[string]*fakeContainer
	calls      []string
	created    []containerSpec
	nextID     int

	// Behaviour of the next containers.
	stdout, stderr []byte
	exitCode       int64
	exitAfter      time.Duration // <0: runs until stopped
	stopFails      bool          // stop errors and leaves it running: kill needed
	unstoppable    bool          // stop and kill succeed but nothing exits
	streamHangs    bool          // the output stream outlives the container
	termCode       int64         // exit code after a successful stop
	startErr       error
	startExitCode  int // inspect's exit code after a failed start
	waitErr        error
	listErr        error
	removeErr      map[string]error // by ID
	samples        []usageSample    // what usage reports of a running container
	usageErr       error
	oomKilled      bool // inspect reports the container OOM-killed
}

type fakeContainer struct {
	id, name string
	labels   map[string]string
	once     sync.Once
	exited   chan struct{}
	code     int64
	started  bool
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{
		images:     map[string]string{"job:latest": "sha256:feed"},
		containers: map[string]*fakeContainer{},
		exitAfter:  time.Millisecond,
		termCode:   143,
	}
}

var _ engine = (*fakeEngine)(nil)

func (f *fakeEngine) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeEngine) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeEngine) get(id string) *fakeContainer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.containers[id]; ok {
		return c
	}
	for _, c := range f.containers {
		if c.name == id {
			return c
		}
	}
	return nil
}

func (c *fakeContainer) exit(code int64) {
	c.once.Do(func() { c.code = code; close(c.exited) })
}

// add places a container directly, as another process would have.
func (f *fakeEngine) add(name string, labels map[string]string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	id := fmt.Sprintf("c%d", f.nextID)
	f.containers[id] = &fakeContainer{id: id, name: name, labels: labels, exited: make(chan struct{})}
	return id
}

func (f *fakeEngine) imageID(ctx context.Context, ref string) (string, error) {
	f.record("imageID %s", ref)
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if id, ok := f.images[ref]; ok {
		return id, nil
	}
	return "", fmt.Errorf("%w: no such image %s", errNotFound, ref)
}

func (f *fakeEngine) create(_ context.Context, cs containerSpec) (string, error) {
	f.record("create %s", cs.Name)
	if f.get(cs.Name) != nil {
		return "", fmt.Errorf("%w: %s", errNameInUse, cs.Name)
	}
	id := f.add(cs.Name, maps.Clone(cs.Labels))
	f.mu.Lock()
	f.created = append(f.created, cs)
	f.mu.Unlock()
	return id, nil
}

type fakeStream struct {
	c              *fakeContainer
	hangs          bool
	stdout, stderr []byte
	closed         chan struct{}
	closeOnce      sync.Once
}

func (s *fakeStream) demux(stdout, stderr io.Writer) error {
	_, _ = stdout.Write(s.stdout)
	_, _ = stderr.Write(s.stderr)
	exited := s.c.exited
	if s.hangs {
		exited = nil
	}
	select {
	case <-exited:
		return nil
	case <-s.closed:
		return errors.New("stream closed")
	}
}

func (s *fakeStream) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

func (f *fakeEngine) stdoutTail(_ context.Context, id string, n int) ([]byte, error) {
	f.record("logs")
	if f.get(id) == nil {
		return nil, errNotFound
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.stdout
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return append([]byte(nil), out...), nil
}

func (f *fakeEngine) attach(_ context.Context, id string) (outputStream, error) {
	f.record("attach")
	c := f.get(id)
	if c == nil {
		return nil, errNotFound
	}
	return &fakeStream{c: c, hangs: f.streamHangs, stdout: f.stdout, stderr: f.stderr, closed: make(chan struct{})}, nil
}

func (f *fakeEngine) wait(ctx context.Context, id string) <-chan waitResult {
	f.record("wait")
	out := make(chan waitResult, 1)
	c := f.get(id)
	go func() {
		if f.waitErr != nil {
			out <- waitResult{ExitCode: -1, Err: f.waitErr}
			return
		}
		select {
		case <-c.exited:
			out <- waitResult{ExitCode: c.code}
		case <-ctx.Done():
			out <- waitResult{ExitCode: -1, Err: ctx.Err()}
		}
	}()
	return out
}

func (f *fakeEngine) start(_ context.Context, id string) error {
	f.record("start")
	if f.startErr != nil {
		return f.startErr
	}
	c := f.get(id)
	c.started = true
	if f.exitAfter >= 0 {
		code := f.exitCode
		time.AfterFunc(f.exitAfter, func() { c.exit(code) })
	}
	return nil
}

func (f *fakeEngine) stop(_ context.Context, id string, grace time.Duration) error {
	f.record("stop %v", grace)
	if f.stopFails {
		return errors.New("stop timed out")
	}
	if f.unstoppable {
		return nil
	}
	if c := f.get(id); c != nil {
		c.exit(f.termCode)
	}
	return nil
}

func (f *fakeEngine) kill(_ context.Context, id string) error {
	f.record("kill")
	if c := f.get(id); c != nil && !f.unstoppable {
		c.exit(137)
	}
	return nil
}

func (f *fakeEngine) remove(_ context.Context, id string) error {
	f.record("remove %s", id)
	if err := f.removeErr[id]; err != nil {
		return err
	}
	c := f.get(id)
	if c == nil {
		return errNotFound
	}
	c.exit(137)
	f.mu.Lock()
	delete(f.containers, c.id)
	f.mu.Unlock()
	return nil
}

func (f *fakeEngine) inspect(_ context.Context, idOrName string) (containerInfo, error) {
	f.record("inspect")
	c := f.get(idOrName)
	if c == nil {
		return containerInfo{}, errNotFound
	}
	info := containerInfo{ID: c.id, Name: c.name, Labels: c.labels}
	select {
	case <-c.exited:
		info.ExitCode = int(c.code)
		info.Exited = c.started
		f.mu.Lock()
		info.OOMKilled = f.oomKilled
		f.mu.Unlock()
	default:
		info.Running = c.started
		if !c.started {
			info.ExitCode = f.startExitCode
		}
	}
	return info, nil
}

func (f *fakeEngine) list(_ context.Context, label, value string) ([]containerInfo, error) {
	f.record("list %s=%s", label, value)
	if f.listErr != nil {
		return nil, f.listErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []containerInfo
	for _, c := range f.containers {
		// Loose on purpose: also returns containers whose label merely
		// starts with the value, which Reap must not touch.
		if v, ok := c.labels[label]; ok && len(v) >= len(value) && v[:len(value)] == value {
			out = append(out, containerInfo{ID: c.id, Name: c.name, Labels: c.labels})
		}
	}
	return out, nil
}

func (f *fakeEngine) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.containers)
}

// usage hands each sample of f.samples in turn, then waits for ctx's end
// like the engine's stream of a running container.
func (f *fakeEngine) usage(ctx context.Context, id string, each func(usageSample)) error {
	f.mu.Lock()
	samples, err := f.samples, f.usageErr
	f.mu.Unlock()
	f.record("usage %s", id)
	if err != nil {
		return err
	}
	for _, s := range samples {
		each(s)
	}
	<-ctx.Done()
	return nil
}
