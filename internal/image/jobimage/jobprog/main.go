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
//	JOB_OUT_TEXT=NAME:TEXT write /job/out/NAME (base name only, as for every JOB_OUT_*)
//	                       holding TEXT and a newline
//	JOB_OUT_BYTES=NAME:N   write /job/out/NAME holding N bytes of filler lines (a huge output)
//	JOB_OUT_LINK=NAME:DEST make /job/out/NAME a symbolic link to DEST (a hostile output)
//	JOB_OUT_REVIEW=N       write /job/out/review.json holding a body and N inline comments
//	                       on README.md line 1 (more than the host ever posts)
//	JOB_WRITE_ROOT=1       try to write /jobprog-root and /tmp/jobprog-tmp; print
//	                       "write / ok|failed" and "write /tmp ok|failed"
//	JOB_OPEN_FILES=N       open /dev/null N times; print "opened K of N files"
//	JOB_SHOW_FILE=PATH     print "file PATH: <first 4 KiB>" (or the error)
//	JOB_WAIT_FILE=PATH     wait until PATH exists (it is not opened: a FIFO counts), so a
//	                       test can put something in the job's folders while it runs (a
//	                       FIFO: the standard library has no mkfifo on every platform this
//	                       program builds for); exit 1 when it has not appeared within 5 minutes
//	JOB_IGNORE_TERM=1      ignore SIGTERM, so only a kill ends the job
//	JOB_ALLOC_BYTES=N      allocate N bytes, write every page of them and keep them until
//	                       the exit (memory figures; past the memory limit, an OOM kill)
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
	out       string // the output folder, /job/out
}

func main() {
	os.Exit(run(os.LookupEnv, os.Stdout, os.Stderr, paths{jobFile: "/job/job.json", workspace: "/workspace", out: "/job/out"}, ignoreTerm))
}

func ignoreTerm() { signal.Ignore(syscall.SIGTERM) }

// run is the whole program; it returns the exit code.
func run(envLookup func(string) (string, bool), stdout, stderr io.Writer, p paths, ignoreTERM func()) int {
	r := &prog{env: envLookup, directives: taskDirectives(p.jobFile), stdout: stdout, stderr: stderr}
	if !r.fill() {
		return 1
	}
	r.greet(p.jobFile)
	checked := r.checkEnv()
	if !r.writeFile(p.workspace) || !r.writeOutputs(p.out) {
		return 1
	}
	r.writeRoot()
	if !r.openFiles() {
		return 1
	}
	r.showFile()
	if !r.waitFile() {
		return 1
	}
	if r.getenv("JOB_IGNORE_TERM") == "1" && ignoreTERM != nil {
		ignoreTERM()
	}
	held, ok := r.alloc()
	if !ok {
		return 1
	}
	if !r.sleep() {
		return 1
	}
	held.touch()
	line := r.exitLine(checked)
	if !r.requiredEnv() {
		return 3
	}
	r.printExitLine(line)
	return r.exitCode()
}

// prog is one run's variables and output, which every step reads or writes.
type prog struct {
	env        func(string) (string, bool)
	directives map[string]string
	stdout     io.Writer
	stderr     io.Writer
}

// getenv reads a JOB_* variable from the environment, else from the task's directives.
func (r *prog) getenv(name string) string {
	if v, ok := r.env(name); ok {
		return v
	}
	return r.directives[name]
}

// fill prints JOB_STDOUT_BYTES of filler, for tests of large outputs; false on a bad value.
func (r *prog) fill() bool {
	raw := r.getenv("JOB_STDOUT_BYTES")
	if raw == "" {
		return true
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 {
		fmt.Fprintf(r.stderr, "jobprog: bad JOB_STDOUT_BYTES %q\n", raw)
		return false
	}
	return filler(r.stdout, n) == nil
}

// greet prints the hello lines and the job file, the output of a job with no variables set.
func (r *prog) greet(jobFile string) {
	fmt.Fprintln(r.stdout, "hello from the pidispatch test job")
	fmt.Fprintln(r.stderr, "jobprog: a line on stderr")
	if data, err := readBounded(jobFile, jobFileLimit); err == nil {
		fmt.Fprintf(r.stdout, "job.json (%d bytes): %s\n", len(data), bytes.TrimSpace(data))
	}
}

// checkEnv reports whether JOB_CHECK_ENV's variable reached the job, never its value.
func (r *prog) checkEnv() map[string]string {
	name := r.getenv("JOB_CHECK_ENV")
	if name == "" {
		return nil
	}
	state := "absent"
	if _, ok := r.env(name); ok {
		state = "present"
	}
	fmt.Fprintf(r.stdout, "env %s %s\n", name, state)
	// Carried in the exit line too, so a worker's run record (its
	// telemetry) shows it without reading output.
	return map[string]string{name: state}
}

// writeFile writes JOB_WRITE_FILE into the workspace, to show the job's writes reach it; false on failure.
func (r *prog) writeFile(workspace string) bool {
	name := r.getenv("JOB_WRITE_FILE")
	if name == "" {
		return true
	}
	target := filepath.Join(workspace, filepath.Base(filepath.Clean("/"+name)))
	if err := os.WriteFile(target, []byte("written by jobprog\n"), 0o644); err != nil {
		fmt.Fprintf(r.stderr, "jobprog: write %s: %v\n", target, err)
		return false
	}
	fmt.Fprintf(r.stdout, "wrote %s\n", target)
	return true
}

// writeOutputs writes the JOB_OUT_* files into the output folder, as a job
// (a hostile one too) leaves them for the host; false on a bad value or a
// failed write.
func (r *prog) writeOutputs(out string) bool {
	// Each name is read as a literal, so the configuration check sees it.
	steps := []struct {
		name, raw string
		write     func(target, arg string) error
	}{
		{"JOB_OUT_TEXT", r.getenv("JOB_OUT_TEXT"), func(target, text string) error { return os.WriteFile(target, []byte(text+"\n"), 0o644) }},
		{"JOB_OUT_BYTES", r.getenv("JOB_OUT_BYTES"), writeFiller},
		{"JOB_OUT_LINK", r.getenv("JOB_OUT_LINK"), func(target, dest string) error { return os.Symlink(dest, target) }},
	}
	for _, st := range steps {
		raw := st.raw
		if raw == "" {
			continue
		}
		name, arg, ok := strings.Cut(raw, ":")
		if !ok || name == "" || out == "" {
			fmt.Fprintf(r.stderr, "jobprog: bad %s %q (want NAME:VALUE, with an output folder)\n", st.name, raw)
			return false
		}
		target := filepath.Join(out, filepath.Base(filepath.Clean("/"+name)))
		if err := st.write(target, arg); err != nil {
			fmt.Fprintf(r.stderr, "jobprog: %s %s: %v\n", st.name, target, err)
			return false
		}
		fmt.Fprintf(r.stdout, "out %s\n", target)
	}
	return r.writeReview(out)
}

// writeFiller writes n (arg) bytes of filler lines to target.
func writeFiller(target, arg string) error {
	n, err := strconv.Atoi(arg)
	if err != nil || n < 0 {
		return fmt.Errorf("bad byte count %q", arg)
	}
	f, err := os.Create(target)
	if err != nil {
		return err
	}
	if err := filler(f, n); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeReview writes JOB_OUT_REVIEW's review.json: a body and N inline
// comments; false on a bad value or a failed write.
func (r *prog) writeReview(out string) bool {
	raw := r.getenv("JOB_OUT_REVIEW")
	if raw == "" {
		return true
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || out == "" {
		fmt.Fprintf(r.stderr, "jobprog: bad JOB_OUT_REVIEW %q\n", raw)
		return false
	}
	var b bytes.Buffer
	b.WriteString(`{"body":"review by jobprog","comments":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"path":"README.md","line":1,"body":"inline comment %d"}`, i+1)
	}
	b.WriteString("]}\n")
	target := filepath.Join(out, "review.json")
	if err := os.WriteFile(target, b.Bytes(), 0o644); err != nil {
		fmt.Fprintf(r.stderr, "jobprog: write %s: %v\n", target, err)
		return false
	}
	fmt.Fprintf(r.stdout, "out %s (%d inline comments)\n", target, n)
	return true
}

// waitFileLimit bounds JOB_WAIT_FILE's wait.
var waitFileLimit = 5 * time.Minute

// waitFile waits until JOB_WAIT_FILE exists (Lstat: a FIFO is never opened,
// a link need not lead anywhere); false when it did not appear in time.
func (r *prog) waitFile() bool {
	name := r.getenv("JOB_WAIT_FILE")
	if name == "" {
		return true
	}
	deadline := time.Now().Add(waitFileLimit)
	for {
		if _, err := os.Lstat(name); err == nil {
			fmt.Fprintf(r.stdout, "found %s\n", name)
			return true
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(r.stderr, "jobprog: %s did not appear within %s\n", name, waitFileLimit)
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeRoot tries, with JOB_WRITE_ROOT=1, the writes a read-only root must refuse and its /tmp allow.
func (r *prog) writeRoot() {
	if r.getenv("JOB_WRITE_ROOT") != "1" {
		return
	}
	for _, target := range []string{"/jobprog-root", "/tmp/jobprog-tmp"} {
		state := "ok"
		if err := os.WriteFile(target, []byte("hostile\n"), 0o644); err != nil {
			state = "failed: " + err.Error()
		}
		fmt.Fprintf(r.stdout, "write %s %s\n", filepath.Dir(target), state)
	}
}

// openFiles opens JOB_OPEN_FILES descriptors, to show where the open-files limit stops it; false on a bad value.
func (r *prog) openFiles() bool {
	raw := r.getenv("JOB_OPEN_FILES")
	if raw == "" {
		return true
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 {
		fmt.Fprintf(r.stderr, "jobprog: bad JOB_OPEN_FILES %q\n", raw)
		return false
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
	fmt.Fprintf(r.stdout, "opened %d of %d files (%v)\n", len(open), n, openErr)
	for _, f := range open {
		f.Close()
	}
	return true
}

// showFile prints the start of JOB_SHOW_FILE, to show what the job can read.
func (r *prog) showFile() {
	name := r.getenv("JOB_SHOW_FILE")
	if name == "" {
		return
	}
	data, err := readBounded(name, jobFileLimit)
	if err != nil {
		fmt.Fprintf(r.stdout, "file %s: %v\n", name, err)
	} else {
		fmt.Fprintf(r.stdout, "file %s: %s\n", name, bytes.TrimSpace(data))
	}
}

// sleep sleeps JOB_SLEEP, so a test can stop or time out a running job; false on a bad value.
func (r *prog) sleep() bool {
	raw := r.getenv("JOB_SLEEP")
	if raw == "" {
		return true
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		fmt.Fprintf(r.stderr, "jobprog: bad JOB_SLEEP %q\n", raw)
		return false
	}
	time.Sleep(d)
	return true
}

// held is memory JOB_ALLOC_BYTES asked for.
type held []byte

// touch reads the memory again, so it is kept until here.
func (h held) touch() {
	if len(h) > 0 && h[len(h)-1] != 1 {
		fmt.Fprintln(os.Stderr, "jobprog: memory lost")
	}
}

// alloc allocates JOB_ALLOC_BYTES and writes every page, so the kernel
// charges all of it to the container; false on a bad value.
func (r *prog) alloc() (held, bool) {
	raw := r.getenv("JOB_ALLOC_BYTES")
	if raw == "" {
		return nil, true
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || n > 16<<30 {
		fmt.Fprintf(r.stderr, "jobprog: bad JOB_ALLOC_BYTES %q\n", raw)
		return nil, false
	}
	b := make(held, n)
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	if n > 0 {
		b[n-1] = 1
	}
	fmt.Fprintf(r.stdout, "allocated %d bytes\n", n)
	return b, true
}

// exitLine is the exit line to print ("" for none), as JOB_PRINT_EXIT_LINE and JOB_EXIT_LINE choose.
func (r *prog) exitLine(checked map[string]string) string {
	line := zeroLine
	switch r.getenv("JOB_PRINT_EXIT_LINE") {
	case "1":
		line = telemetryLine
	case "0":
		line = ""
	}
	if line != "" && checked != nil {
		line = withCheckedEnv(line, checked)
	}
	if raw := r.getenv("JOB_EXIT_LINE"); raw != "" {
		// A hostile job's own exit line: ${NAME} takes the value of the
		// environment variable NAME (a secret, say).
		line = os.Expand(raw, func(name string) string { v, _ := r.env(name); return v })
	}
	return line
}

// requiredEnv reports whether JOB_REQUIRE_ENV's variable reached the job, saying so on stderr when not.
func (r *prog) requiredEnv() bool {
	if name := r.getenv("JOB_REQUIRE_ENV"); name != "" {
		if _, ok := r.env(name); !ok {
			fmt.Fprintf(r.stderr, "env %s absent\n", name)
			return false
		}
	}
	return true
}

// printExitLine prints the exit line, after text without a newline with JOB_GLUE=1 (a glued line).
func (r *prog) printExitLine(line string) {
	if line == "" {
		return
	}
	if r.getenv("JOB_GLUE") == "1" {
		fmt.Fprint(r.stdout, "text without a newline")
	}
	fmt.Fprintln(r.stdout, line)
}

// exitCode is JOB_EXIT_CODE, so a test can end the job with any code; 1 on a bad value.
func (r *prog) exitCode() int {
	raw := r.getenv("JOB_EXIT_CODE")
	if raw == "" {
		return 0
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || n > 255 {
		fmt.Fprintf(r.stderr, "jobprog: bad JOB_EXIT_CODE %q\n", raw)
		return 1
	}
	return n
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
