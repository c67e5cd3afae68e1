package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/config"
)

// A fleet key file the worker cannot trust refuses boot, naming the
// variable and the rule; a good one is read, and never printed.
func TestLoad_FleetKeyFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	long := strings.Repeat("s3cr3t-k3y-", 4)
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"missing":          {map[string]string{"PI_FLEET_KEY_FILE": filepath.Join(dir, "nope")}, "can read"},
		"short":            {map[string]string{"PI_FLEET_KEY_FILE": write("short", "abc", 0o600)}, "at least 32 bytes"},
		"world-readable":   {map[string]string{"PI_FLEET_KEY_FILE": write("world", long, 0o644)}, "not be readable by every user"},
		"relative":         {map[string]string{"PI_FLEET_KEY_FILE": "fleet.key"}, ""},
		"a queue pattern":  {map[string]string{"PI_UNSIGNED_QUEUES": "pi-jobs@*"}, "queue names"},
		"bad queue":        {map[string]string{"PI_FLEET_KEY_FILE": write("ok1", long, 0o600), "PI_UNSIGNED_QUEUES": "pi-jobs,bull:x"}, "queue names"},
		"output too small": {map[string]string{"PI_JOB_OUTPUT_MAX": "1k"}, "between 64k and 1g"},
	} {
		_, err := config.Load(func(k string) string { return tc.env[k] })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal naming %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), long) {
			t.Errorf("%s: the key is in the error", name)
		}
	}
	good := write("good", long, 0o600)
	c, err := config.Load(func(k string) string {
		return map[string]string{"PI_FLEET_KEY_FILE": good, "PI_UNSIGNED_QUEUES": "pi-jobs, pi-jobs@node-1", "PI_JOB_OUTPUT_MAX": "1m"}[k]
	})
	if err != nil || !c.FleetKey.IsSet() || len(c.UnsignedQueues) != 2 || c.JobOutputMax != 1<<20 {
		t.Fatalf("good key: %+v %v", c, err)
	}
	if strings.Contains(c.String(), long) {
		t.Fatal("the key is in the config's summary")
	}
}

// Without a key, PI_UNSIGNED_QUEUES is the operator's opt-in to run jobs
// nobody signed: accepted, with * for every queue.
func TestLoad_UnsignedQueuesWithoutAKey(t *testing.T) {
	for _, v := range []string{"pi-jobs", "*", "pi-jobs,pi-jobs@web"} {
		c, err := config.Load(func(k string) string { return map[string]string{"PI_UNSIGNED_QUEUES": v}[k] })
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if c.FleetKey.IsSet() || strings.Join(c.UnsignedQueues, ",") != v {
			t.Fatalf("%s: %+v", v, c.UnsignedQueues)
		}
	}
}
