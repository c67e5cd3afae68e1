package fleettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/internal/image/jobimage"
)

// envFleet turns the suite on; .ci/run sets it.
const envFleet = "PIDISPATCH_FLEET"

// suite is what TestMain prepares once for every scenario.
var suite struct {
	// setupErr is why the suite could not be prepared; every scenario fails
	// with it (a missing service fails, it never skips, once envFleet is set).
	setupErr error
	// dir holds every scenario's files (logs dirs, stderr captures, the
	// binaries). It outlives the tests so TestMain can count the records.
	dir string
	// id is random per run and part of every worker name: the Docker daemon
	// is shared with other test binaries, and the reaper of a worker removes
	// every container labelled with its name.
	id        string
	workerBin string
	// faultBin is cmd/worker built with the tag faultpoint: it crashes
	// itself (SIGKILL) at the step PIDISPATCH_TEST_CRASH_AT names
	// (internal/faultpoint), and only the fault scenarios run it.
	faultBin string
	cliBin   string
	redis    *redisServer
	docker   *client.Client
	nextDB   atomic.Int32

	ledger ledger
	// faultLines are the fault scenarios' figures, printed before the
	// closing total.
	faultLines lines
}

// lines collects text from parallel scenarios.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, line)
}

func (l *lines) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.all)
}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	flag.Parse() // testing.Short needs the flags parsed
	if os.Getenv(envFleet) != "1" || testing.Short() {
		return m.Run() // every scenario skips
	}
	suite.setupErr = setup()
	code := m.Run()
	if suite.setupErr == nil {
		enqueued, accounted, problems := suite.ledger.total()
		for _, line := range suite.faultLines.list() {
			fmt.Println(line)
		}
		fmt.Printf("fleet total: %d jobs enqueued, %d with exactly one terminal record\n", enqueued, accounted)
		for _, p := range problems {
			fmt.Printf("  %s\n", p)
		}
		if enqueued != accounted {
			code = 1
		}
	}
	teardown(code == 0)
	return code
}

// setup builds the binaries, the job image and the suite's redis-server.
func setup() error {
	dir, err := os.MkdirTemp("", "pidispatch-fleet-")
	if err != nil {
		return err
	}
	suite.dir = dir
	suite.id = randomHex(2)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var buildErr, imageErr error
	wg.Go(func() { buildErr = buildBinaries(ctx, filepath.Join(dir, "bin")) })
	wg.Go(func() { imageErr = prepareDocker(ctx) })
	wg.Wait()
	if err := errors.Join(buildErr, imageErr); err != nil {
		return err
	}
	suite.redis, err = startRedis(filepath.Join(dir, "redis"), false)
	return err
}

// buildBinaries builds cmd/worker and cmd/pi-dispatch into binDir.
func buildBinaries(ctx context.Context, binDir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	suite.workerBin = filepath.Join(binDir, "worker")
	suite.cliBin = filepath.Join(binDir, "pi-dispatch")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", binDir+string(filepath.Separator),
		"github.com/pidispatch/pidispatch/cmd/worker",
		"github.com/pidispatch/pidispatch/cmd/pi-dispatch")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build cmd/worker cmd/pi-dispatch: %v\n%s", err, out)
	}
	suite.faultBin = filepath.Join(binDir, "fault", "worker")
	cmd = exec.CommandContext(ctx, goBin, "build", "-tags", "faultpoint", "-o", suite.faultBin,
		"github.com/pidispatch/pidispatch/cmd/worker")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build -tags faultpoint cmd/worker: %v\n%s", err, out)
	}
	return nil
}

// prepareDocker pings the daemon and makes sure the test job image exists.
func prepareDocker(ctx context.Context) error {
	dc, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := dc.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		dc.Close()
		return fmt.Errorf("docker daemon: %w", err)
	}
	suite.docker = dc
	if err := jobimage.Ensure(ctx, dc, jobimage.TestTag); err != nil {
		return fmt.Errorf("job image %s: %w", jobimage.TestTag, err)
	}
	return nil
}

// teardown stops the suite's server and removes its files; a failed run
// keeps the files (records, worker logs) and says where.
func teardown(passed bool) {
	if suite.redis != nil {
		_ = suite.redis.stop()
	}
	if suite.docker != nil {
		suite.docker.Close()
	}
	if suite.dir == "" {
		return
	}
	if passed {
		os.RemoveAll(suite.dir)
		return
	}
	fmt.Printf("fleet files kept for inspection: %s\n", suite.dir)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
