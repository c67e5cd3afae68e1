// Command jobprog is the test and demo job: a static program that follows the
// container contract (docs/container-contract.md) and whose behaviour is
// set entirely by environment variables, so one image serves every runner test
// and the `demo` command.
//
// With no variables set it prints a hello line (and one line to stderr), shows
// /job/job.json when it is mounted, prints an exit line with zero telemetry and
// exits 0. The variables, applied in this order:
//
//	JOB_STDOUT_BYTES=N     print N bytes of filler lines first
//	JOB_CHECK_ENV=NAME     print "env NAME present" or "env NAME absent" (never the value),
//	                       and add "checkedEnv":{"NAME":"present"|"absent"} to the exit line
//	JOB_WRITE_FILE=NAME    write /workspace/NAME (base name only)
//	JOB_WRITE_ROOT=1       try to write /jobprog-root and /tmp/jobprog-tmp; print
//	                       "write / ok|failed" and "write /tmp ok|failed"
//	JOB_OPEN_FILES=N       open /dev/null N times; print "opened K of N files"
//	JOB_SHOW_FILE=PATH     print "file PATH: <first 4 KiB>" (or the error)
//	JOB_IGNORE_TERM=1      ignore SIGTERM, so only a kill ends the job
//	JOB_SLEEP=DURATION     sleep (Go duration syntax) before the exit line
//	JOB_PRINT_EXIT_LINE=1  exit line {"event":"exit","turns":3,"tokens":1234,"cost":0.05};
//	                       0 prints none; unset prints the zero-telemetry line
//	JOB_REQUIRE_ENV=NAME   exit 3 before the exit line when NAME is not in the environment
//	JOB_EXIT_LINE=TEXT     print TEXT as the exit line instead, ${NAME} replaced by the
//	                       value of the environment variable NAME (a hostile job)
//	JOB_GLUE=1             print text without a newline right before the exit line
//	JOB_EXIT_CODE=N        exit with N (default 0)
//
// The same variables may also come from the job itself: every line of the
// "task" field of /job/job.json that reads JOB_NAME=value sets that variable
// unless the environment already does. That is how a test (or the demo)
// asks a job run by the real worker to exit 1, sleep, or check an env var.
//
// The program uses only the standard library so the image builds from a
// temporary module anywhere (see package jobimage).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// TelemetryLine is what JOB_PRINT_EXIT_LINE=1 prints.
	telemetryLine = `{"event":"exit","turns":3,"tokens":1234,"cost":0.05}`
	// zeroLine is the default exit line: the protocol without invented spend.
	zeroLine = `{"event":"exit","turns":0,"tokens":0,"cost":0}`
	// jobFileLimit bounds how much of /job/job.json is echoed.
	jobFileLimit = 4 << 10
	// fillerLine is one line of JOB_STDOUT_BYTES filler (80 bytes with the newline).
	fillerLine = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-filler-line-____\n"
)

// paths lets tests point the program at folders of their own.
type paths struct {
	jobFile   string
	workspace string
}

func main() {
	os.Exit(run(os.LookupEnv, os.Stdout, os.Stderr, paths{jobFile: "/job/job.json", workspace: "/workspace"}, ignoreTerm))
}

func ignoreTerm() { signal.Ignore(syscall.SIGTERM) }

// run is the whole program; it returns the exit code.
func run(envLookup func(string) (string, bool), stdout, stderr io.Writer, p paths, ignoreTERM func()) int {
	directives := taskDirectives(p.jobFile)
	lookup := func(name string) (string, bool) {
		if v, ok := envLookup(name); ok {
			return v, true
		}
		v, ok := directives[name]
		return v, ok
	}
	getenv := func(name string) string { v, _ := lookup(name); return v }
	if raw := getenv("JOB_STDOUT_BYTES"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			fmt.Fprintf(stderr, "jobprog: bad JOB_STDOUT_BYTES %q\n", raw)
			return 1
		}
		if err := filler(stdout, n); err != nil {
			return 1
		}
	}

	fmt.Fprintln(stdout, "hello from the pidispatch test job")
	fmt.Fprintln(stderr, "jobprog: a line on stderr")

	if data, err := readBounded(p.jobFile, jobFileLimit); err == nil {
		fmt.Fprintf(stdout, "job.json (%d bytes): %s\n", len(data), bytes.TrimSpace(data))
	}

	// checked is what the env check found, carried in the exit line too so a
	// worker's run record (its telemetry) shows it without reading output.
	var checked map[string]string
	if name := getenv("JOB_CHECK_ENV"); name != "" {
		state := "absent"
		if _, ok := envLookup(name); ok {
			state = "present"
		}
		fmt.Fprintf(stdout, "env %s %s\n", name, state)
		checked = map[string]string{name: state}
	}

	if name := getenv("JOB_WRITE_FILE"); name != "" {
		target := filepath.Join(p.workspace, filepath.Base(filepath.Clean("/"+name)))
		if err := os.WriteFile(target, []byte("written by jobprog\n"), 0o644); err != nil {
			fmt.Fprintf(stderr, "jobprog: write %s: %v\n", target, err)
			return 1
		}
		fmt.Fprintf(stdout, "wrote %s\n", target)
	}

	if getenv("JOB_WRITE_ROOT") == "1" {
		for _, target := range []string{"/jobprog-root", "/tmp/jobprog-tmp"} {
			state := "ok"
			if err := os.WriteFile(target, []byte("hostile\n"), 0o644); err != nil {
				state = "failed: " + err.Error()
			}
			fmt.Fprintf(stdout, "write %s %s\n", filepath.Dir(target), state)
		}
	}

	if raw := getenv("JOB_OPEN_FILES"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			fmt.Fprintf(stderr, "jobprog: bad JOB_OPEN_FILES %q\n", raw)
			return 1
		}
		var open []*os.File
		var openErr error
		for len(open) < n {
			f, err := os.Open(os.DevNull)
			if err != nil {
				openErr = err
				break
			}
			open = append(open, f)
		}
		fmt.Fprintf(stdout, "opened %d of %d files (%v)\n", len(open), n, openErr)
		for _, f := range open {
			f.Close()
		}
	}

	if name := getenv("JOB_SHOW_FILE"); name != "" {
		data, err := readBounded(name, jobFileLimit)
		if err != nil {
			fmt.Fprintf(stdout, "file %s: %v\n", name, err)
		} else {
			fmt.Fprintf(stdout, "file %s: %s\n", name, bytes.TrimSpace(data))
		}
	}

	if getenv("JOB_IGNORE_TERM") == "1" && ignoreTERM != nil {
		ignoreTERM()
	}

	if raw := getenv("JOB_SLEEP"); raw != "" {
		d, err := time.ParseDuration(raw)
		if err != nil || d < 0 {
			fmt.Fprintf(stderr, "jobprog: bad JOB_SLEEP %q\n", raw)
			return 1
		}
		time.Sleep(d)
	}

	line := zeroLine
	switch getenv("JOB_PRINT_EXIT_LINE") {
	case "1":
		line = telemetryLine
	case "0":
		line = ""
	}
	if line != "" && checked != nil {
		line = withCheckedEnv(line, checked)
	}
	if name := getenv("JOB_REQUIRE_ENV"); name != "" {
		if _, ok := envLookup(name); !ok {
			fmt.Fprintf(stderr, "env %s absent\n", name)
			return 3
		}
	}
	if raw := getenv("JOB_EXIT_LINE"); raw != "" {
		// A hostile job's own exit line: ${NAME} takes the value of the
		// environment variable NAME (a secret, say).
		line = os.Expand(raw, func(name string) string { v, _ := envLookup(name); return v })
	}
	if line != "" {
		if getenv("JOB_GLUE") == "1" {
			fmt.Fprint(stdout, "text without a newline")
		}
		fmt.Fprintln(stdout, line)
	}

	code := 0
	if raw := getenv("JOB_EXIT_CODE"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 || n > 255 {
			fmt.Fprintf(stderr, "jobprog: bad JOB_EXIT_CODE %q\n", raw)
			return 1
		}
		code = n
	}
	return code
}

// withCheckedEnv adds "checkedEnv":{...} as the last field of the exit line
// (an object ending in '}').
func withCheckedEnv(line string, checked map[string]string) string {
	b, err := json.Marshal(checked)
	if err != nil {
		return line
	}
	return strings.TrimSuffix(line, "}") + `,"checkedEnv":` + string(b) + "}"
}

// filler writes exactly n bytes of newline-terminated lines (the last one may
// be cut short).
func filler(w io.Writer, n int) error {
	chunk := bytes.Repeat([]byte(fillerLine), 64)
	for n > 0 {
		k := min(n, len(chunk))
		if _, err := w.Write(chunk[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// readBounded reads at most limit bytes of a regular file.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// taskDirectives reads JOB_NAME=value lines from the task of the job file.
func taskDirectives(jobFile string) map[string]string {
	data, err := readBounded(jobFile, 1<<20)
	if err != nil {
		return nil
	}
	var job struct {
		Task string `json:"task"`
	}
	if json.Unmarshal(data, &job) != nil {
		return nil
	}
	out := map[string]string{}
	for _, line := range strings.Split(job.Task, "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && strings.HasPrefix(name, "JOB_") {
			out[name] = value
		}
	}
	return out
}
