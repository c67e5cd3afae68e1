//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

// A local job runs as its folder's owner: with every capability dropped, a
// job run as root could not write a checkout another uid owns. The file it
// writes belongs to the folder's owner, not to root.
func TestLocalJobRunsAsTheFolderOwner(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the folder to another uid")
	}
	ensureImage(t)
	db := livetest.Valkey(t)
	name := uniqueName("owner", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name}), dispatch.Tuning{})

	folder := t.TempDir()
	if err := os.Chmod(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(folder, 4321, 4322); err != nil {
		t.Fatal(err)
	}
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: folder, Flow: "fix", Task: "JOB_WRITE_FILE=mine.txt"})
	if err != nil {
		t.Fatal(err)
	}
	rec := waitRecord(t, w.cfg.LogsDir, e.JobID, 60*time.Second)
	if rec.Outcome != jobs.OutcomeCompleted {
		t.Fatalf("record %+v: the job could not write its folder", rec)
	}
	fi, err := os.Stat(filepath.Join(folder, "mine.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4321 || st.Gid != 4322 {
		t.Fatalf("the job's file is owned by %d:%d, want the folder owner's 4321:4322", st.Uid, st.Gid)
	}
}

// PI_CONTAINER_USER=image keeps the image's own user (root in the test
// image): it cannot write the folder another uid owns, and says so by
// failing, which is what the owner rule is for.
func TestContainerUserImageKeepsTheImagesUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the folder to another uid")
	}
	ensureImage(t)
	db := livetest.Valkey(t)
	name := uniqueName("imguser", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name, "PI_CONTAINER_USER": "image"}), dispatch.Tuning{})

	folder := t.TempDir()
	if err := os.Chmod(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(folder, 4321, 4322); err != nil {
		t.Fatal(err)
	}
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: folder, Flow: "fix", Task: "JOB_WRITE_FILE=mine.txt"})
	if err != nil {
		t.Fatal(err)
	}
	rec := waitRecord(t, w.cfg.LogsDir, e.JobID, 60*time.Second)
	if rec.Outcome == jobs.OutcomeCompleted {
		t.Fatalf("record %+v: a capability-less root wrote a folder it does not own", rec)
	}
	if _, err := os.Stat(filepath.Join(folder, "mine.txt")); !os.IsNotExist(err) {
		t.Fatalf("file written: %v", err)
	}
}
