package dispatch

import (
	"fmt"

	"github.com/pidispatch/pidispatch/internal/hostfolder"
)

// containerUser is the user a job's container runs as on this host, in the
// form container.Spec.User takes ("" is the image's USER). Under the owner rule
// a job with a folder runs as the folder's owner, read here at run time: the
// folder is this host's, mounted from this host, so only this host can say
// who owns it. A job without a folder works in a fresh folder anyone may
// write, and keeps the image's user. folder is the job's resolved folder
// ("" for none).
func (w *Worker) containerUser(folder string) (string, error) {
	user, _ := hostfolder.ParseUser(w.cfg.ContainerUser)
	switch {
	case user == hostfolder.UserImage:
		return "", nil
	case user != hostfolder.UserOwner:
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
