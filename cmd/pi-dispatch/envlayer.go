package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/internal/envfile"
	"github.com/pidispatch/pidispatch/operator"
)

// layerEnvFile gives a command the environment the worker boots with: the
// env file of the one rule (internal/envfile: $PI_ENV_FILE, else ./.env)
// under the shell, which wins.
func layerEnvFile(e env, shell func(string) string) (env, error) {
	layered, err := envfile.Load(shell)
	if err != nil {
		return e, err
	}
	e.getenv, e.shell, e.vars = layered.Getenv, shell, layered
	return e, nil
}

// killSwitchEnv are the only variables the kill-switch commands need
// from the env file: where Valkey is and its password.
var killSwitchEnv = []string{"VALKEY_URL", "VALKEY_PASSWORD"}

// layerEnvFileLenient is layerEnvFile for the kill-switch commands: a line
// of the file that does not parse is dropped with a warning naming it, and
// the command goes on, unless that line sets VALKEY_URL or VALKEY_PASSWORD
// (acting on another Valkey than the workers' would be worse than refusing).
func layerEnvFileLenient(e env, shell func(string) string, cmd string) (env, error) {
	layered, warnings := envfile.LoadLenient(shell)
	for _, w := range warnings {
		var se *envfile.SyntaxError
		if errors.As(w, &se) && slices.Contains(killSwitchEnv, se.Key) && shell(se.Key) == "" {
			return e, fmt.Errorf("env file %w: %s must parse for this command; fix that line", se, se.Key)
		}
		fmt.Fprintf(e.stderr, "pi-dispatch %s: warning: %v (line ignored: this command reads only %s)\n",
			cmd, w, strings.Join(killSwitchEnv, " and "))
	}
	e.getenv, e.shell, e.vars = layered.Getenv, shell, layered
	return e, nil
}

// envFileFlag declares --env-file, for the commands that let a run name its
// env file (run, doctor); applyEnvFileFlag honours it.
func envFileFlag(fset *flag.FlagSet) *string {
	return fset.String("env-file", "", `the env file under the shell's variables, instead of $PI_ENV_FILE or ./.env ("" reads none)`)
}

// applyEnvFileFlag re-layers e on the file --env-file named, when it was
// given: that file must exist.
func applyEnvFileFlag(fset *flag.FlagSet, e env, path string) (env, error) {
	given := false
	fset.Visit(func(f *flag.Flag) { given = given || f.Name == "env-file" })
	return applyEnvFile(e, given, path)
}

// applyEnvFile re-layers e on path when --env-file was given.
func applyEnvFile(e env, given bool, path string) (env, error) {
	if !given || e.shell == nil {
		return e, nil
	}
	layered, err := envfile.LoadPath(e.shell, path, path != "")
	if errors.Is(err, fs.ErrNotExist) {
		return e, fmt.Errorf("%w (named by --env-file)", err)
	}
	if err != nil {
		return e, err
	}
	e.getenv, e.vars = layered.Getenv, layered
	return e, nil
}

// envSources is doctor's first check: which env file was read and where each
// configuration variable came from (the shell, that file, or its default);
// then a warning when the shell overrides a different value in the file,
// which a worker its unit starts from that file would not see.
func envSources(e env) []operator.Check {
	if e.vars == nil {
		return nil
	}
	var shell, file, overridden []string
	for _, k := range config.EnvVars {
		src, en, over := e.vars.Source(k)
		switch src {
		case envfile.FromShell:
			shell = append(shell, k)
		case envfile.FromFile:
			file = append(file, fmt.Sprintf("%s (line %d)", k, en.Line))
		}
		if over {
			overridden = append(overridden, fmt.Sprintf("%s (line %d)", k, en.Line))
		}
	}
	var b strings.Builder
	path := e.vars.Path
	if e.vars.Path == "" {
		b.WriteString("environment: no env file read (PI_ENV_FILE unset, no ./.env)")
	} else {
		fmt.Fprintf(&b, "environment: env file %s read, the shell winning over it", path)
	}
	if len(shell) > 0 {
		fmt.Fprintf(&b, "; from the shell: %s", strings.Join(shell, ", "))
	}
	if len(file) > 0 {
		fmt.Fprintf(&b, "; from the file: %s", strings.Join(file, ", "))
	}
	b.WriteString("; every other variable: its default")
	checks := []operator.Check{{Status: operator.CheckOK, Name: "env", Detail: b.String()}}
	for _, u := range unknownVars(e) {
		checks = append(checks, operator.Check{Status: operator.CheckWarn, Name: "env-unknown",
			Detail: u.Name + " is set but nothing reads it", Fix: u.String()})
	}
	if len(overridden) > 0 {
		checks = append(checks, operator.Check{
			Status: operator.CheckWarn, Name: "env-override",
			Detail: fmt.Sprintf("the shell overrides %s for %s", path, strings.Join(overridden, ", ")),
			Fix:    "a worker started from that file uses the file's value; unset the variable in the shell or make the two agree",
		})
	}
	return checks
}

// unknownVars lists the variables of the env file and the shell that look
// like the software's own but that nothing reads (config.UnknownVars).
func unknownVars(e env) []config.UnknownVar {
	if e.vars == nil {
		return nil
	}
	return config.UnknownVars(e.vars.Names(os.Environ()))
}

// warnUnknownVars logs each unknown variable (config_unknown_variable), for
// the long-running commands (receive, poll).
func warnUnknownVars(e env, log *slog.Logger) {
	for _, u := range unknownVars(e) {
		log.Warn("config_unknown_variable", "name", u.Name, "closest", u.Closest, "fix", u.String())
	}
}

// envFrom is run's note of where the values that route a job came from:
// " (PI_WORKER_NAME from .env file /x/.env:3, ...)", or "" when no env file
// was read or all are defaults.
func envFrom(e env, keys ...string) string {
	if e.vars == nil || e.vars.Path == "" {
		return ""
	}
	var parts []string
	for _, k := range keys {
		if src, _, _ := e.vars.Source(k); src != envfile.FromDefault {
			parts = append(parts, k+" from "+e.vars.Describe(k))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
