package stack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/pidispatch/pidispatch/agent/flows"
	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/cronsync"
)

// CheckTriggerFlows refuses a triggers file whose triggers (cron or forge)
// name a flow the host does not know: a worker or a receiver does not boot
// on it (each problem a *config.ConfigError naming PI_TRIGGERS_FILE, the
// trigger and the flow), so no job of it is refused later. A file that is
// missing or does not parse is left to its own readers.
func CheckTriggerFlows(path string, catalog flows.Catalog) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || err != nil {
		return nil
	}
	known := strings.Join(catalog.Names(), ", ")
	var errs config.ConfigErrors
	unknown := func(index int, name, flow string) {
		if flow == "" {
			return
		}
		if _, ok := catalog.Lookup(flow); !ok {
			errs = append(errs, &config.ConfigError{Var: "PI_TRIGGERS_FILE", Value: path,
				Rule: fmt.Sprintf("triggers[%d] (%s): run.flow %q is not a flow this host knows (%s); add %s.md to PI_FLOWS_DIR", index, name, flow, known, flow)})
		}
	}
	if entries, err := cronsync.Authored(path); err == nil {
		for _, e := range entries {
			unknown(e.Index, e.SchedulerID, e.Local.Flow)
		}
	}
	if fts, err := cronsync.ParseForgeTriggers(data); err == nil {
		for _, t := range fts {
			unknown(t.Index, t.Name, t.Job.Flow)
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
