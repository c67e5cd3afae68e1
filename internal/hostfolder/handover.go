package hostfolder

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// HandOver gives the cloned workspace to the container's user ("uid[:gid]"),
// or, for the image's own user, makes it writable by anyone: the host cloned
// it as itself.
func HandOver(dir, user string) error {
	uid, gid := -1, -1
	if user != "" {
		u, g, _ := strings.Cut(user, ":")
		var err error
		if uid, err = strconv.Atoi(u); err != nil {
			uid = -1
		}
		if g != "" {
			if gid, err = strconv.Atoi(g); err != nil {
				gid = -1
			}
		}
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if uid >= 0 {
			return os.Lchown(p, uid, gid)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode().Perm() | 0o666
		if d.IsDir() || info.Mode().Perm()&0o100 != 0 {
			mode |= 0o111
		}
		return os.Chmod(p, mode)
	})
}
