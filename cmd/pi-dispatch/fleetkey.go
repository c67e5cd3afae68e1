package main

import (
	"errors"
	"fmt"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/fleet"
)

// fleetKeyFromEnv reads the fleet key PI_FLEET_KEY_FILE names, by the
// worker's rules; none when unset. A key file the worker would refuse
// refuses the command (exit 2), naming the variable and the rule.
func fleetKeyFromEnv(e env, cmd string) (fleet.Key, int) {
	path := e.getenv("PI_FLEET_KEY_FILE")
	if path == "" {
		return fleet.Key{}, exitOK
	}
	cfg := config.Default()
	cfg.FleetKeyFile = path
	err := cfg.Validate()
	var errs config.ConfigErrors
	if errors.As(err, &errs) {
		for _, ce := range errs {
			if ce.Var == "PI_FLEET_KEY_FILE" {
				fmt.Fprintf(e.stderr, "pi-dispatch %s: %v (docs/configuration.md)\n", cmd, ce)
				return fleet.Key{}, exitUsage
			}
		}
	}
	k, err := fleet.LoadKey(path)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch %s: PI_FLEET_KEY_FILE=%s: %v (docs/configuration.md)\n", cmd, path, err)
		return fleet.Key{}, exitUsage
	}
	return k, exitOK
}
