package cronsync

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync/atomic"

	"github.com/pidispatch/pidispatch/fingerprint"
)

// UnservedFolderAbsent is the reason a trigger is not installed on a host that
// does not have its folder.
const UnservedFolderAbsent = "folder-absent"

// readFile reads a triggers file of at most MaxFileBytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, &TriggerError{Index: -1, Reason: fmt.Sprintf("file is more than %d bytes", MaxFileBytes)}
	}
	return data, nil
}

// Authored returns the cron set of the triggers file at path as written: every
// cron entry, whether or not its folder exists here (no filesystem check but the
// read). It is what a host's fingerprint covers: hosts must agree about the
// file, and legitimately differ about which entries each can run.
//
// A file that does not exist returns nil, nil: this host has no opinion to
// state. A file with no cron entry returns an empty, non-nil slice: an opinion.
// A file that cannot be read or parsed is an error (for a parse, errors.Join of
// *TriggerError values, each wrapping ErrInvalidTriggers).
func Authored(path string) ([]Entry, error) {
	data, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("triggers file: %w", err)
	}
	t, err := ParseTriggers(data)
	if err != nil {
		return nil, err
	}
	return t.Cron, nil
}

// Own is a host's view of its own triggers file, as the agreement gate needs
// it. The three states are different answers and must not be conflated:
//
//   - Configured false: PI_TRIGGERS_FILE is unset; cron is disabled and the
//     host abstains (publishes an empty fingerprint, never disagrees, never
//     reconciles).
//   - Configured, Entries non-nil (possibly empty): the host's opinion.
//   - Configured, Entries nil: the file is configured but absent or unreadable
//     at this instant (Err says why). The host publishes an empty fingerprint
//     like an abstainer, but it refuses to reconcile while any peer holds an
//     opinion.
type Own struct {
	Configured bool
	Entries    []Entry
	Err        error
}

// ReadOwn reads this host's triggers file into an Own. An empty path means
// PI_TRIGGERS_FILE is unset.
func ReadOwn(path string) Own {
	if path == "" {
		return Own{}
	}
	entries, err := Authored(path)
	if err == nil && entries == nil {
		err = fmt.Errorf("triggers file %s: %w", path, fs.ErrNotExist)
	}
	if err != nil {
		return Own{Configured: true, Err: err}
	}
	return Own{Configured: true, Entries: entries}
}

// Unserved is an authored entry this host does not install.
type Unserved struct {
	Entry  Entry
	Reason string // UnservedFolderAbsent
}

// FolderExists reports whether path is a directory on this machine.
func FolderExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// Served splits an authored set into the entries this host installs and the
// ones it leaves to the host that has their folder. Placement applies only to
// a host whose name is declared (it has a queue of its own, and the fleet knows
// which machine it is); an undeclared host serves every entry, as a single host
// always did. folderExists defaults to FolderExists.
func Served(set []Entry, declared bool, folderExists func(string) bool) (served []Entry, unserved []Unserved) {
	if folderExists == nil {
		folderExists = FolderExists
	}
	served = make([]Entry, 0, len(set))
	for _, e := range set {
		if declared && !folderExists(e.Local.Folder) {
			unserved = append(unserved, Unserved{Entry: e, Reason: UnservedFolderAbsent})
			continue
		}
		served = append(served, e)
	}
	return served, unserved
}

// Fingerprint is the cron-set fingerprint of an authored set in the host's
// zone tz: fingerprint.Cron over {schedulerId, pattern, run} of every entry, in
// file order. A nil set is "no opinion" and returns "".
//
// An entry with its own zone (on.tz, our addition) is hashed with the pattern
// written as "CRON_TZ=<zone> <pattern>", the convention cron implementations
// use for the same thing: a zone change is then a disagreement peers can see,
// while a file without per-trigger zones hashes exactly as the original's does,
// so Node and Go hosts with the same file agree.
func Fingerprint(set []Entry, tz string) (string, error) {
	if set == nil {
		return "", nil
	}
	entries := make([]fingerprint.CronEntry, len(set))
	for i, e := range set {
		pattern := e.Pattern
		if e.TZ != "" {
			pattern = "CRON_TZ=" + e.TZ + " " + pattern
		}
		entries[i] = fingerprint.CronEntry{SchedulerID: e.SchedulerID, Pattern: pattern, Run: e.Run}
	}
	return fingerprint.Cron(entries, tz)
}

// LiveSet is the authored set this host currently believes, shared between the
// watcher (which replaces it on every valid reload, before reconciling) and the
// registry's facts (read at every beat). Its FPCron and CronCount methods are
// registry.Fact values:
//
//	registry.Facts{FPCron: live.FPCron, CronCount: live.CronCount, ...}
//
// so the row follows the live set and is never frozen at boot. It is safe for
// concurrent use.
type LiveSet struct {
	tz  string
	cur atomic.Pointer[liveState]
}

type liveState struct {
	own Own
	fp  string
	err error
}

// NewLiveSet starts a live set at own (what boot read) in zone tz, the same
// zone the registry publishes and the gate fingerprints with.
func NewLiveSet(own Own, tz string) *LiveSet {
	s := &LiveSet{tz: tz}
	s.store(own)
	return s
}

func (s *LiveSet) store(own Own) {
	st := &liveState{own: own}
	if own.Configured {
		st.fp, st.err = Fingerprint(own.Entries, s.tz)
	}
	s.cur.Store(st)
}

// Update replaces the set with a valid authored set (non-nil; empty is an
// opinion). Only a file that parsed may update it: an invalid edit keeps the
// last good set, and what this host publishes keeps matching what it has
// installed.
func (s *LiveSet) Update(entries []Entry) {
	if entries == nil {
		entries = []Entry{}
	}
	s.store(Own{Configured: true, Entries: entries})
}

// Own returns the current state.
func (s *LiveSet) Own() Own { return s.cur.Load().own }

// TZ is the host zone the set is fingerprinted in.
func (s *LiveSet) TZ() string { return s.tz }

// FPCron is the fingerprint to publish: "" when the host abstains or cannot
// read its file.
func (s *LiveSet) FPCron() (string, error) {
	st := s.cur.Load()
	return st.fp, st.err
}

// CronCount is how many cron entries the host has authored (all of them, not
// only the ones it serves): what a peer compares with its own count when the
// fingerprints differ.
func (s *LiveSet) CronCount() (int, error) {
	return len(s.cur.Load().own.Entries), nil
}
