package dispatch

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pidispatch/pidispatch/hostfolder"
)

// The keywords of PI_CONTAINER_USER.
const (
	// ContainerUserOwner runs a folder job as its folder's owner (the default).
	ContainerUserOwner = "owner"
	// ContainerUserImage runs every job as the image's own USER.
	ContainerUserImage = "image"
	// ContainerUserRoot runs every job as 0:0.
	ContainerUserRoot = "root"
)

// parseContainerUser reads PI_CONTAINER_USER: "" or "owner" gives "owner",
// "image" gives "image", "root" gives "0:0", and "UID:GID" (decimal numbers
// up to 2^32-2) gives itself. rule is the broken rule, or "".
func parseContainerUser(v string) (user, rule string) {
	switch v {
	case "", ContainerUserOwner:
		return ContainerUserOwner, ""
	case ContainerUserImage:
		return ContainerUserImage, ""
	case ContainerUserRoot:
		return "0:0", ""
	}
	uid, gid, ok := strings.Cut(v, ":")
	if ok && validID(uid) && validID(gid) {
		return v, ""
	}
	return "", `must be "owner" (the folder's owner, the default), "image" (the image's USER), "root", or UID:GID in numbers`
}

// validID accepts a decimal uid or gid without sign or leading zero, below
// 2^32-1 (which Linux reserves as "no id").
func validID(s string) bool {
	if s == "" || len(s) > 10 || (len(s) > 1 && s[0] == '0') {
		return false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return err == nil && n < 1<<32-1
}

// containerUser is the user a job's container runs as on this host, in the
// form container.Spec.User takes ("" is the image's USER). Under the owner rule
// a job with a folder runs as the folder's owner, read here at run time: the
// folder is this host's, mounted from this host, so only this host can say
// who owns it. A job without a folder works in a fresh folder anyone may
// write, and keeps the image's user. folder is the job's resolved folder
// ("" for none).
func (w *Worker) containerUser(folder string) (string, error) {
	user, _ := parseContainerUser(w.cfg.ContainerUser)
	switch {
	case user == ContainerUserImage:
		return "", nil
	case user != ContainerUserOwner:
		return user, nil
	case folder == "":
		return "", nil
	}
	owner, err := hostfolder.Owner(folder)
	if err != nil {
		return "", fmt.Errorf("read the owner of the job's folder: %w", err)
	}
	return owner, nil
}
