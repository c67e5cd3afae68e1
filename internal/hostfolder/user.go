package hostfolder

import (
	"strconv"
	"strings"
)

// The keywords of PI_CONTAINER_USER.
const (
	// UserOwner runs a folder job as its folder's owner (the default).
	UserOwner = "owner"
	// UserImage runs every job as the image's own USER.
	UserImage = "image"
	// UserRoot runs every job as 0:0.
	UserRoot = "root"
)

// ParseUser reads PI_CONTAINER_USER: "" or "owner" gives "owner",
// "image" gives "image", "root" gives "0:0", and "UID:GID" (decimal numbers
// up to 2^32-2) gives itself. rule is the broken rule, or "".
func ParseUser(v string) (user, rule string) {
	switch v {
	case "", UserOwner:
		return UserOwner, ""
	case UserImage:
		return UserImage, ""
	case UserRoot:
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

// UserRule is the rule a PI_CONTAINER_USER value breaks, or "".
func UserRule(v string) string {
	_, rule := ParseUser(v)
	return rule
}
