package dispatch

import (
	"fmt"
	"os"
)

// PrepareLogsDir creates the run records' folder when missing and proves the
// worker can write a file in it. A folder it cannot create or write is a
// *ConfigError for PI_LOGS_DIR naming the fix: every record would be lost,
// and restarting cannot help, so the worker refuses boot (exit 2) instead of
// failing each job.
func PrepareLogsDir(dir string) error {
	fail := func(err error) error {
		return &ConfigError{Var: "PI_LOGS_DIR", Value: dir, Rule: fmt.Sprintf(
			"the worker (uid %d) cannot create or write it (%v): create it for that user (sudo install -d -o <user> %s) or point PI_LOGS_DIR at a folder it can write",
			os.Getuid(), err, dir)}
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fail(err)
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fail(err)
	}
	name := f.Name()
	cerr := f.Close()
	rerr := os.Remove(name)
	if cerr != nil {
		return fail(cerr)
	}
	if rerr != nil {
		return fail(rerr)
	}
	return nil
}
