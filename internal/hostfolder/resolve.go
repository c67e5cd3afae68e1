// Package hostfolder holds the rules of a job's folders on this host: where
// a local job's folder may be (Resolve, under PI_FOLDER_ROOTS), who owns it
// (Owner, UID), who a job runs as (ParseUser, the PI_CONTAINER_USER rule),
// and handing a cloned workspace to the container's user (HandOver).
package hostfolder

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/pidispatch/pidispatch/internal/check"
)

// RootsHint is what a refusal, `run` and `doctor` say when no folder
// root is set.
const RootsHint = "set PI_FOLDER_ROOTS to the colon-separated absolute folders jobs may work in (for example PI_FOLDER_ROOTS=$HOME/projects); `pi-dispatch init` writes it for the folder it runs in"

// Refusal is why Resolve refused a folder. It never repeats the
// folder (the job wrote it); Rule says what broke.
type Refusal struct{ Rule string }

func (e *Refusal) Error() string { return "folder not allowed: " + e.Rule }

// Resolve decides whether a job may work in folder on this host and
// returns the folder with every symlink resolved: the path to mount, so a
// folder swapped for a symlink after this check is not followed. The folder
// must be a directory inside one of roots (each resolved too, so a root
// that is itself a symlink works); a relative path, "..", a file or a
// symlink that leads out of every root is refused. No roots refuse every
// folder.
func Resolve(folder string, roots []string) (string, error) {
	if len(roots) == 0 {
		return "", &Refusal{Rule: "PI_FOLDER_ROOTS is not set: " + RootsHint}
	}
	if rule := check.AbsClean(folder); rule != "" {
		return "", &Refusal{Rule: "the folder " + rule}
	}
	resolved, err := filepath.EvalSymlinks(folder)
	if err != nil {
		return "", &Refusal{Rule: "the folder cannot be resolved on this host"}
	}
	fi, err := os.Lstat(resolved)
	if err != nil || !fi.IsDir() {
		return "", &Refusal{Rule: "the folder is not a directory"}
	}
	for _, root := range roots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		if within(resolved, r) {
			return resolved, nil
		}
	}
	return "", &Refusal{Rule: "the folder is outside every PI_FOLDER_ROOTS folder"}
}

// within reports whether p is root or below it (both clean and absolute).
func within(p, root string) bool {
	if p == root {
		return true
	}
	if root == "/" {
		return true
	}
	return strings.HasPrefix(p, root+string(filepath.Separator))
}
