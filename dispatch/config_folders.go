package dispatch

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/jobs"
)

// The settings that keep a job's data from deciding a host path, an image or
// a network (docs/security.md). Job data is written by whoever can write to
// Valkey; these come from the host's own environment only.

// trustEnvVars are the variables of this file, in EnvVars order.
var trustEnvVars = []string{
	"PI_FOLDER_ROOTS",
	"PI_JOB_IMAGES",
	"PI_SECRET_NETWORK_PROFILES",
}

func init() {
	// After PI_CONTAINER_USER, the setting they sit beside.
	i := slices.Index(EnvVars, "PI_CONTAINER_USER") + 1
	EnvVars = append(EnvVars[:i:i], append(append([]string(nil), trustEnvVars...), EnvVars[i:]...)...)
}

// MaxFolderRoots bounds PI_FOLDER_ROOTS and MaxJobImages PI_JOB_IMAGES.
const (
	MaxFolderRoots = 64
	MaxJobImages   = 64
)

// FolderRootsHint is what a refusal, `run` and `doctor` say when no folder
// root is set.
const FolderRootsHint = "set PI_FOLDER_ROOTS to the colon-separated absolute folders jobs may work in (for example PI_FOLDER_ROOTS=$HOME/projects); `pi-dispatch init` writes it for the folder it runs in"

// readTrust reads the variables of this file.
func (r *envReader) readFolders(c *Config) {
	parseEnv(r, "PI_FOLDER_ROOTS", parseFolderRoots, &c.FolderRoots)
	parseEnv(r, "PI_JOB_IMAGES", parseJobImages, &c.JobImages)
	parseEnv(r, "PI_SECRET_NETWORK_PROFILES", parseNameList, &c.SecretNetworkProfiles)
	if _, ok := r.raw["PI_CONTAINER_USER"]; ok {
		c.ContainerUserExplicit = true
	}
}

// parseFolderRoots reads "/abs/a:/abs/b": absolute clean paths, no duplicates.
func parseFolderRoots(s string) ([]string, string) {
	roots := strings.Split(s, ":")
	if rule := folderRootsRule(roots); rule != "" {
		return nil, rule
	}
	return roots, ""
}

func folderRootsRule(roots []string) string {
	if len(roots) > MaxFolderRoots {
		return fmt.Sprintf("at most %d folders", MaxFolderRoots)
	}
	for i, r := range roots {
		if r == "" {
			return fmt.Sprintf("entry %d is empty (write /abs/one:/abs/two)", i+1)
		}
		if rule := check.AbsClean(r); rule != "" {
			return fmt.Sprintf("entry %d: %s", i+1, rule)
		}
		if r == "/" {
			return "/ would let a job name any folder of the machine; name the folders jobs work in"
		}
		if slices.Index(roots, r) != i {
			return fmt.Sprintf("entry %d repeats %s", i+1, r)
		}
	}
	return ""
}

// parseJobImages reads "img:tag,registry/img@sha256:...".
func parseJobImages(s string) ([]string, string) {
	images := strings.Split(s, ",")
	if rule := jobImagesRule(images); rule != "" {
		return nil, rule
	}
	return images, ""
}

func jobImagesRule(images []string) string {
	if len(images) > MaxJobImages {
		return fmt.Sprintf("at most %d images", MaxJobImages)
	}
	for i, im := range images {
		if !jobs.ValidImageRef(im) {
			return fmt.Sprintf("entry %d is not an image reference ([registry/]name[:tag][@digest], lowercase name)", i+1)
		}
	}
	return ""
}

// parseNameList reads "a,b" of profile names.
func parseNameList(s string) ([]string, string) {
	names := strings.Split(s, ",")
	for i, n := range names {
		if !check.Name(n) {
			return nil, fmt.Sprintf("entry %d must match %s", i+1, check.NameSyntax)
		}
	}
	return names, ""
}

// trustProblems checks the settings of this file.
func (c Config) folderProblems(p *problemList) {
	if len(c.FolderRoots) > 0 {
		if rule := folderRootsRule(c.FolderRoots); rule != "" {
			p.add("PI_FOLDER_ROOTS", strings.Join(c.FolderRoots, ":"), rule)
		}
	}
	if len(c.JobImages) > 0 {
		if rule := jobImagesRule(c.JobImages); rule != "" {
			p.add("PI_JOB_IMAGES", strings.Join(c.JobImages, ","), rule)
		}
	}
	for _, n := range c.SecretNetworkProfiles {
		if _, ok := c.SecretProfiles[n]; !ok {
			p.add("PI_SECRET_NETWORK_PROFILES", strings.Join(c.SecretNetworkProfiles, ","),
				fmt.Sprintf("names profile %s, which PI_SECRET_PROFILES does not declare", check.Quote(n)))
			break
		}
	}
}

// ImageAllowed reports whether job data may name image on this host: the
// default image and the ones PI_JOB_IMAGES lists.
func (c Config) ImageAllowed(image string) bool {
	return image == "" || image == c.JobImage || slices.Contains(c.JobImages, image)
}

// SecretNetworkAllowed reports whether a job of secrets profile may join a
// network: only a profile PI_SECRET_NETWORK_PROFILES names may, since a job
// holding secrets and a network can send them anywhere.
func (c Config) SecretNetworkAllowed(profile string) bool {
	return profile == "" || slices.Contains(c.SecretNetworkProfiles, profile)
}

// FolderRefusal is why ResolveFolder refused a folder. It never repeats the
// folder (the job wrote it); Rule says what broke.
type FolderRefusal struct{ Rule string }

func (e *FolderRefusal) Error() string { return "folder not allowed: " + e.Rule }

// ResolveFolder decides whether a job may work in folder on this host and
// returns the folder with every symlink resolved: the path to mount, so a
// folder swapped for a symlink after this check is not followed. The folder
// must be a directory inside one of roots (each resolved too, so a root
// that is itself a symlink works); a relative path, "..", a file or a
// symlink that leads out of every root is refused. No roots refuse every
// folder.
func ResolveFolder(folder string, roots []string) (string, error) {
	if len(roots) == 0 {
		return "", &FolderRefusal{Rule: "PI_FOLDER_ROOTS is not set: " + FolderRootsHint}
	}
	if rule := check.AbsClean(folder); rule != "" {
		return "", &FolderRefusal{Rule: "the folder " + rule}
	}
	resolved, err := filepath.EvalSymlinks(folder)
	if err != nil {
		return "", &FolderRefusal{Rule: "the folder cannot be resolved on this host"}
	}
	fi, err := os.Lstat(resolved)
	if err != nil || !fi.IsDir() {
		return "", &FolderRefusal{Rule: "the folder is not a directory"}
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
	return "", &FolderRefusal{Rule: "the folder is outside every PI_FOLDER_ROOTS folder"}
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
