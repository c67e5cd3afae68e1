package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/internal/hostfolder"
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
const FolderRootsHint = hostfolder.RootsHint

// ResolveFolder is the folder a worker of this configuration would run for a
// local job's folder: every link resolved, inside PI_FOLDER_ROOTS; else the
// error it refuses the job with (folder-not-allowed).
func (c Config) ResolveFolder(folder string) (string, error) {
	return hostfolder.Resolve(folder, c.FolderRoots)
}

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
