package inbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/jobs"
)

// Delivery is one verified forge delivery as the inbox keeps it: what the
// receiver verified (the raw body, signed by the forge) and the headers the
// event is read with. It is stored before it is answered, and read back, in
// Valkey and in the spool, in one format (Encode). It is stored once by its
// Key, not by its ID.
type Delivery struct {
	Forge jobs.Forge
	// ID is the forge's delivery id header, [A-Za-z0-9._-]{1,100}: logged,
	// never trusted to tell deliveries apart (no forge signs it).
	ID string
	// Event is the forge's event type header (X-GitHub-Event, X-Gitlab-Event,
	// X-Forgejo-Event): [A-Za-z0-9 _.-]{1,64}.
	Event string
	// Body is the raw body the signature was checked over.
	Body []byte
	// Received is when the receiver took it (its own clock).
	Received time.Time
}

var (
	deliveryIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	eventTypeRE  = regexp.MustCompile(`^[A-Za-z0-9 _.-]{1,64}$`)
)

// keyHexLen is a delivery key's length: 128 bits of SHA-256 in hex. Only the
// forge can sign a body, so keys collide only by chance among its own.
const keyHexLen = 32

// Key is the delivery's identity: the inbox stores a delivery once by it,
// and the jobs it starts are named after it (gh-<key>). It is a digest of the
// forge and of the body the forge signed, and of nothing the sender may
// change: the delivery id and the event type are headers no signature covers
// (GitHub, Forgejo, GitLab's token mode), so a signed body re-sent under a
// new id, or under another event type that reads it alike (Forgejo's
// "issues" and "issue_label"), is the same delivery. A forge gives each event
// a body of its own (its ids and times), so two real events never share a
// key, and the forge's own redelivery of one is the same delivery.
func (d Delivery) Key() string {
	h := sha256.New()
	h.Write([]byte("pidispatch-delivery-key 1\x00"))
	h.Write([]byte(d.Forge))
	h.Write([]byte{0})
	h.Write(d.Body)
	return hex.EncodeToString(h.Sum(nil))[:keyHexLen]
}

// ValidID reports whether s is a delivery id the inbox keeps: it becomes
// part of a Valkey key, a job id and a log line.
func ValidID(s string) bool { return deliveryIDRE.MatchString(s) }

// knownForge reports whether f is one of the forges a delivery comes from.
func knownForge(f jobs.Forge) bool {
	return f == jobs.ForgeGitHub || f == jobs.ForgeGitLab || f == jobs.ForgeForgejo
}

// Forges are the forges an inbox keeps deliveries of, in the order the
// processor visits them.
var Forges = []jobs.Forge{jobs.ForgeGitHub, jobs.ForgeGitLab, jobs.ForgeForgejo}

// ErrInvalid marks a stored delivery that does not read back as one: a
// truncated spool file, a changed Valkey value, a body over the limit.
var ErrInvalid = errors.New("inbox: invalid stored delivery")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// check validates d's fields against maxBody.
func (d Delivery) check(maxBody int64) error {
	switch {
	case !knownForge(d.Forge):
		return invalid("unknown forge")
	case !ValidID(d.ID):
		return invalid("delivery id")
	case !eventTypeRE.MatchString(d.Event):
		return invalid("event type")
	case len(d.Body) == 0:
		return invalid("empty body")
	case int64(len(d.Body)) > maxBody:
		return invalid("body of %d bytes, over the limit of %d", len(d.Body), maxBody)
	}
	return nil
}

// The stored form is a short text header, a blank line, then the body:
//
//	pidispatch-delivery 1
//	forge <forge>
//	id <delivery id>
//	event <event type>
//	received <unix ms>
//	bytes <length of the body>
//	sha256 <hex digest of the lines above it, after the first, and the body>
//
//	<body>
//
// The length and the digest make a truncated or altered copy fail Decode.
const magic = "pidispatch-delivery 1"

// maxHeader bounds the header: its lines are all bounded.
const maxHeader = 512

// Encode is d's stored form.
func (d Delivery) Encode() []byte {
	fields := fmt.Sprintf("forge %s\nid %s\nevent %s\nreceived %d\nbytes %d\n",
		d.Forge, d.ID, d.Event, d.Received.UnixMilli(), len(d.Body))
	var b bytes.Buffer
	b.Grow(maxHeader + len(d.Body))
	fmt.Fprintf(&b, "%s\n%ssha256 %s\n\n", magic, fields, digest(fields, d.Body))
	b.Write(d.Body)
	return b.Bytes()
}

// digest is the hex SHA-256 of the header's fields and the body.
func digest(fields string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(fields))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Decode reads a stored delivery back and re-validates all of it: the
// header's shape, each field's rule, the body's length (at most maxBody) and
// digest. Anything else is ErrInvalid.
func Decode(data []byte, maxBody int64) (Delivery, error) {
	head, body, ok := bytes.Cut(data, []byte("\n\n"))
	if !ok || len(head) > maxHeader {
		return Delivery{}, invalid("no header")
	}
	lines := bytes.Split(head, []byte("\n"))
	want := []string{"", "forge", "id", "event", "received", "bytes", "sha256"}
	if len(lines) != len(want) || string(lines[0]) != magic {
		return Delivery{}, invalid("header")
	}
	vals := make([]string, len(want))
	for i := 1; i < len(want); i++ {
		k, v, ok := bytes.Cut(lines[i], []byte(" "))
		if !ok || string(k) != want[i] {
			return Delivery{}, invalid("header line %d", i+1)
		}
		vals[i] = string(v)
	}
	d := Delivery{Forge: jobs.Forge(vals[1]), ID: vals[2], Event: vals[3], Body: body}
	ms, err := strconv.ParseInt(vals[4], 10, 64)
	if err != nil || ms < 0 || ms > 253402300799999 {
		return Delivery{}, invalid("received")
	}
	d.Received = time.UnixMilli(ms).UTC()
	n, err := strconv.ParseInt(vals[5], 10, 64)
	if err != nil || n != int64(len(body)) {
		return Delivery{}, invalid("body of %d bytes, the header says %s", len(body), vals[5])
	}
	var fields bytes.Buffer
	for _, l := range lines[1:6] {
		fields.Write(l)
		fields.WriteByte('\n')
	}
	if digest(fields.String(), body) != vals[6] {
		return Delivery{}, invalid("digest")
	}
	if err := d.check(maxBody); err != nil {
		return Delivery{}, err
	}
	return d, nil
}

// Parse reads d's body with its forge's own parser, as the receiver did
// before storing it. The event's DeliveryID is d's Key, so its jobs are
// named after the body, whatever id header it came with.
func Parse(d Delivery) (forge.Event, error) { return parseAs(d, d.Key()) }

// parseAs reads d as the delivery id: its Key, or the id an entry stored
// before keys existed was stored (and its jobs named) under.
func parseAs(d Delivery, id string) (forge.Event, error) {
	switch d.Forge {
	case jobs.ForgeGitHub:
		return forge.ParseGitHub(d.Event, id, d.Body)
	case jobs.ForgeGitLab:
		return forge.ParseGitLab(d.Event, id, d.Body)
	case jobs.ForgeForgejo:
		return forge.ParseForgejo(d.Event, id, d.Body)
	}
	return forge.Event{}, invalid("unknown forge")
}
