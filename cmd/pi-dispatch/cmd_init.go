package main

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
)

func init() {
	register(command{name: "init", summary: "scaffold fleet.key, .env, triggers.json, scoped-limits.json and a pause-windows example here (never overwrites)", help: initHelp, run: cmdInit})
}

// envExample is a copy of the repository's .env.example (a test keeps the two
// identical): the documented defaults of every variable.
//
//go:embed env.example
var envExample string

const initUsage = `usage: pi-dispatch init [--dir DIR]

Writes a deployment's files into DIR (default: the current folder):
fleet.key (a new signing key, mode 0600), .env (mode 0600) naming it,
triggers.json, scoped-limits.json and pause-windows.example.json
(an example, not read). A file that exists is kept as it is, never
overwritten. In a git work tree, the files it writes are added to
.git/info/exclude, so git does not offer to commit them.
`

// Files init writes.
const (
	initFleetKeyFile     = "fleet.key"
	initEnvFile          = ".env"
	initTriggersFile     = "triggers.json"
	initScopedLimitsFile = "scoped-limits.json"
)

// initTriggers is an empty, valid triggers file: an example cron entry
// cannot live in it, because JSON has no comments and the triggers parser
// refuses unknown keys (an "_comment" included). The example is printed
// instead (triggersHelp).
const initTriggers = `{
  "triggers": []
}
`

// triggersExample is one cron trigger, printed by init; a test checks that
// the triggers parser accepts it.
const triggersExample = `{"on": {"type": "cron", "id": "nightly-deps", "pattern": "0 3 * * *", "tz": "Europe/Amsterdam"},
     "run": {"kind": "local", "folder": "/srv/app", "flow": "fix", "task": "Update the dependencies"}}`

const initScopedLimits = `{
  "version": 1,
  "limits": [
    { "scope": "acme/web", "concurrent": 1, "day": 20 }
  ]
}
`

func cmdInit(ctx context.Context, e env, args []string) int {
	dir, code, done := parseInitArgs(e, args)
	if done {
		return code
	}
	created, failed := writeInitFiles(e, dir)
	printInitGuide(e, dir, created)
	if len(created) > 0 && !printGitExclude(ctx, e, dir, created) {
		failed = true
	}
	fmt.Fprintln(e.stdout, "next: pi-dispatch doctor")
	if failed {
		return exitFailure
	}
	return exitOK
}

// parseInitArgs reads init's arguments into the deployment folder; done means the command ends with code.
func parseInitArgs(e env, args []string) (dir string, code int, done bool) {
	fset := flag.NewFlagSet("init", flag.ContinueOnError)
	fset.SetOutput(e.stderr)
	fset.Usage = func() { fmt.Fprint(e.stderr, initUsage); fset.PrintDefaults() }
	dirFlag := fset.String("dir", "", "the deployment folder (default: the current folder)")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", exitOK, true
		}
		return "", exitUsage, true
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(e.stderr, "pi-dispatch init: unexpected argument %q (use --dir DIR)\n", fset.Arg(0))
		return "", exitUsage, true
	}
	dir, err := deploymentDir(*dirFlag)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch init: %v\n", err)
		return "", exitUsage, true
	}
	return dir, exitOK, false
}

// initFile is one file init writes.
type initFile struct {
	name    string
	mode    fs.FileMode
	content string
}

// initFiles are the files init writes into dir, in the order it reports them.
func initFiles(dir string) []initFile {
	return []initFile{
		{initFleetKeyFile, 0o600, newFleetKey()},
		{initEnvFile, 0o600, scaffoldEnv(envExample, dir)},
		{initTriggersFile, 0o644, initTriggers},
		{initScopedLimitsFile, 0o644, initScopedLimits},
		{initPauseWindowsFile, 0o644, initPauseWindows},
	}
}

// newFleetKey is a fresh fleet key file's content: 48 random bytes in
// base64, which any host reads the same (the file's bytes are the key).
func newFleetKey() string {
	b := make([]byte, 48)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return base64.StdEncoding.EncodeToString(b) + "\n"
}

// writeInitFiles creates each file that is missing, never overwriting one, and says what it did with each.
func writeInitFiles(e env, dir string) (created []string, failed bool) {
	for _, f := range initFiles(dir) {
		ok, err := createNew(filepath.Join(dir, f.name), f.mode, f.content)
		if ok {
			created = append(created, f.name)
		}
		switch {
		case err != nil:
			fmt.Fprintf(e.stderr, "pi-dispatch init: %s: %v\n", f.name, err)
			failed = true
		case !ok:
			fmt.Fprintf(e.stdout, "kept %s (it exists; not overwritten)\n", f.name)
			if f.mode == 0o600 {
				warnIfReadableByOthers(e, filepath.Join(dir, f.name))
			}
		case f.mode == 0o600:
			fmt.Fprintf(e.stdout, "created %s (mode 0600)\n", f.name)
		default:
			fmt.Fprintf(e.stdout, "created %s\n", f.name)
		}
	}
	return created, failed
}

// printInitGuide says what each file init created is for; a kept file is the operator's already.
func printInitGuide(e env, dir string, created []string) {
	if len(created) == 0 {
		return
	}
	fmt.Fprintf(e.stdout, "\nin %s:\n", dir)
	if slices.Contains(created, initFleetKeyFile) {
		fmt.Fprint(e.stdout, `  fleet.key           the fleet's signing key (keep it secret, mode 0600). Copy it
                      to every host, receiver and producer of the fleet: a
                      worker refuses a job it did not sign.
`)
		if !slices.Contains(created, initEnvFile) {
			fmt.Fprintf(e.stdout, "                      .env was kept: set PI_FLEET_KEY_FILE=%s in it.\n", filepath.Join(dir, initFleetKeyFile))
		}
	}
	if slices.Contains(created, initEnvFile) {
		fmt.Fprint(e.stdout, `  .env                the worker's configuration, every variable with its default.
                      PI_SCOPED_LIMITS_FILE names ./scoped-limits.json (paths
                      resolve in the worker's working directory); set
                      PI_WORKER_NAME on each host of a fleet.
`)
	}
	if slices.Contains(created, initScopedLimitsFile) {
		fmt.Fprint(e.stdout, "  scoped-limits.json  per-scope limits; the example row limits acme/web.\n")
	}
	if slices.Contains(created, initTriggersFile) {
		fmt.Fprintf(e.stdout, `  triggers.json       cron triggers. It starts empty: JSON has no comments, and
                      the parser refuses unknown keys. A cron trigger looks like
    %s
                      Cron is off until PI_TRIGGERS_FILE in .env is uncommented
                      (unset, this host abstains from the fleet's cron agreement).
`, triggersExample)
	}
	if slices.Contains(created, initPauseWindowsFile) {
		fmt.Fprint(e.stdout, initPauseWindowsHelp)
	}
}

// deploymentDir is the --dir value made absolute, or the current folder; it
// must be an existing directory.
func deploymentDir(flagValue string) (string, error) {
	dir := flagValue
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		dir = wd
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", abs)
	}
	return abs, nil
}

// warnIfReadableByOthers flags a kept .env that others can read: it may hold
// VALKEY_PASSWORD.
func warnIfReadableByOthers(e env, path string) {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 == 0 {
		return
	}
	fmt.Fprintf(e.stderr, "pi-dispatch init: warning: %s is readable by others (mode %04o); it may hold VALKEY_PASSWORD: chmod 600 %s\n", path, fi.Mode().Perm(), path)
}

// createNew writes a file that must not exist yet (O_EXCL: an existing file,
// or a symlink, is kept untouched and created is false).
func createNew(path string, mode fs.FileMode, content string) (created bool, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, werr := f.WriteString(content)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
		return false, werr
	}
	return true, nil
}

// scaffoldEnv turns .env.example into a deployment's .env that systemd's
// EnvironmentFile and docker compose read alike: systemd takes everything
// after '=' as the value, so a comment that trails an assignment moves to
// its own line above it. PI_SCOPED_LIMITS_FILE is set to the scaffolded file
// (left commented, it is the original's documented trap: an edited limits
// file that nothing reads); PI_TRIGGERS_FILE stays commented, since an empty
// cron set is an opinion that would stop a fleet's cron reconcile until every
// host agrees. PI_FOLDER_ROOTS is set to folderRoot (the folder init runs
// in): without it no folder job runs, and the folder an operator scaffolds a
// deployment in is the one they mean jobs to work in; "" or a path the env
// file cannot hold plainly leaves it commented.
func scaffoldEnv(example, folderRoot string) string {
	var b strings.Builder
	b.WriteString("# Written by pi-dispatch init from .env.example. Read by the worker's\n")
	b.WriteString("# EnvironmentFile (systemd) or env_file (docker compose): no comment may\n")
	b.WriteString("# follow a value on its line.\n")
	lines := strings.Split(strings.TrimRight(example, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			b.WriteString("\n")
			continue
		case strings.HasPrefix(line, "#"):
			b.WriteString(scaffoldComment(line, folderRoot) + "\n")
			continue
		case strings.HasPrefix(trimmed, "#"):
			// A continuation of the comment above, indented under it.
			b.WriteString("#   " + strings.TrimSpace(strings.TrimPrefix(trimmed, "#")) + "\n")
			continue
		}
		assign, comment := splitTrailingComment(line)
		var block []string
		if comment != "" {
			block = append(block, "# "+comment)
		}
		for i+1 < len(lines) && strings.HasPrefix(lines[i+1], " ") && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "#") {
			i++
			block = append(block, "#   "+strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[i]), "#")))
		}
		for _, c := range block {
			b.WriteString(c + "\n")
		}
		b.WriteString(assign + "\n")
	}
	return b.String()
}

// scaffoldComment uncomments PI_SCOPED_LIMITS_FILE, whose relative path
// resolves against the worker's working directory: the unit's
// WorkingDirectory, the compose file's working_dir; and sets
// PI_FLEET_KEY_FILE to the fleet.key init writes beside it (the variable
// takes an absolute path).
func scaffoldComment(line, folderRoot string) string {
	body := strings.TrimSpace(strings.TrimPrefix(line, "#"))
	if strings.HasPrefix(body, "PI_FOLDER_ROOTS=") && plainEnvPath(folderRoot) {
		return "PI_FOLDER_ROOTS=" + folderRoot
	}
	if strings.HasPrefix(body, "PI_FLEET_KEY_FILE=") && plainEnvPath(folderRoot) {
		return "PI_FLEET_KEY_FILE=" + filepath.Join(folderRoot, initFleetKeyFile)
	}
	if assign, comment := splitTrailingComment(body); assign == "PI_SCOPED_LIMITS_FILE=./"+initScopedLimitsFile {
		if comment != "" {
			return "# " + comment + "\n" + assign
		}
		return assign
	}
	return line
}

// plainEnvPath reports whether p is an absolute path an env file holds
// unquoted and PI_FOLDER_ROOTS can name: no space, quote, '#', '$', '\\'
// or ':', and not "/".
func plainEnvPath(p string) bool {
	return filepath.IsAbs(p) && p != "/" && !strings.ContainsAny(p, " \t\"'#$\\:") && !strings.ContainsFunc(p, unicode.IsControl)
}

// splitTrailingComment splits "KEY=value   # comment" at the first " #".
func splitTrailingComment(line string) (assign, comment string) {
	i := strings.Index(line, " #")
	if i < 0 {
		return strings.TrimSpace(line), ""
	}
	return strings.TrimSpace(line[:i]), strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line[i:]), "#"))
}
