// The fleet's signing key signs what the fleet's own parts write to the
// shared Valkey, so a party that can write there but holds no key cannot pass
// for one of them: jobs, signed by every producer that holds the key and
// checked by the worker that runs them, and the hosts' registry rows, checked
// by the router. A signature is HMAC-SHA256 over a canonical encoding
// (package fingerprint's canonical JSON) of what it covers, in hex.
//
// The key is a file on each host (PI_FLEET_KEY_FILE), never stored in Valkey.

package fleet

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/pidispatch/pidispatch/fingerprint"
)

// MinKeyLen is the shortest key accepted, in bytes.
const MinKeyLen = 32

// maxKeyFile bounds how much of a key file is read.
const maxKeyFile = 64 << 10

// SignatureLen is the length of a signature in hex.
const SignatureLen = 2 * sha256.Size

// The refusals of Load.
var (
	ErrKeyUnreadable    = errors.New("unreadable")
	ErrKeyTooShort      = fmt.Errorf("shorter than %d bytes", MinKeyLen)
	ErrKeyWorldReadable = errors.New("readable by every user of the machine (chmod 600 or 640)")
)

// Key is the fleet's signing key. The zero Key signs nothing and verifies
// nothing (IsSet is false): a fleet without a key does not sign.
type Key struct{ b []byte }

// New returns a key of the given bytes (at least MinKeyLen).
func NewKey(b []byte) (Key, error) {
	if len(b) < MinKeyLen {
		return Key{}, ErrKeyTooShort
	}
	return Key{b: append([]byte(nil), b...)}, nil
}

// Load reads the key file at path. The file's bytes are the key, whitespace
// included (a generator's trailing newline is part of it on every host
// alike). It refuses a file it cannot read, a key shorter than MinKeyLen and
// a file every user may read.
func LoadKey(path string) (Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrKeyUnreadable, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrKeyUnreadable, err)
	}
	if !fi.Mode().IsRegular() {
		return Key{}, fmt.Errorf("%w: not a regular file", ErrKeyUnreadable)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		return Key{}, ErrKeyWorldReadable
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile))
	if err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrKeyUnreadable, err)
	}
	return NewKey(b)
}

// IsSet reports whether the key signs (a zero Key does not).
func (k Key) IsSet() bool { return len(k.b) > 0 }

// String never shows the key.
func (k Key) String() string {
	if k.IsSet() {
		return "[fleet key]"
	}
	return "[no fleet key]"
}

// GoString never shows the key either (%#v).
func (k Key) GoString() string { return k.String() }

// MarshalJSON never shows the key.
func (k Key) MarshalJSON() ([]byte, error) { return json.Marshal(k.String()) }

func (k Key) mac(doc any) (string, error) {
	if !k.IsSet() {
		return "", errors.New("fleet key: none set")
	}
	msg, err := fingerprint.Canonical(doc)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, k.b)
	m.Write(msg)
	return hex.EncodeToString(m.Sum(nil)), nil
}

func (k Key) verify(doc any, sig string) bool {
	if !k.IsSet() || len(sig) != SignatureLen {
		return false
	}
	want, err := k.mac(doc)
	if err != nil {
		return false
	}
	return hmac.Equal([]byte(want), []byte(sig))
}

// jobDoc is what a job's signature covers: the queue and id bind it to its
// place, so a signed job copied to another id or queue does not verify.
func jobDoc(queue, id string, data json.RawMessage) map[string]any {
	return map[string]any{"kind": "job", "queue": queue, "id": id, "data": data}
}

// SignJob signs a job's place (queue, id) and data. The data must be JSON;
// its canonical form is signed, so a client that re-encodes it (another key
// order, other number spelling) keeps the signature valid.
func (k Key) SignJob(queue, id string, data json.RawMessage) (string, error) {
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return k.mac(jobDoc(queue, id, data))
}

// VerifyJob reports whether sig is k's signature of the job.
func (k Key) VerifyJob(queue, id string, data json.RawMessage, sig string) bool {
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return k.verify(jobDoc(queue, id, data), sig)
}

// SignRow signs a registry row: every field the host writes, by name.
func (k Key) SignRow(fields map[string]string) (string, error) {
	return k.mac(rowDoc(fields))
}

// VerifyRow reports whether sig is k's signature of the row's fields.
func (k Key) VerifyRow(fields map[string]string, sig string) bool {
	return k.verify(rowDoc(fields), sig)
}

func rowDoc(fields map[string]string) map[string]any {
	m := make(map[string]any, len(fields))
	for f, v := range fields {
		m[f] = v
	}
	return map[string]any{"kind": "row", "fields": m}
}
