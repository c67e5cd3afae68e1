package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/valkey"
)

const testFlag = "pi:paused"

// A queue declared while the flag is set starts paused; without it, running.
func TestDeclarePausedIf(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	q1, _ := queue.New(db.Client, fleet.HostQueueName("new1"), queue.Config{})
	paused, err := q1.DeclarePausedIf(ctx, testFlag)
	if err != nil || paused {
		t.Fatalf("without the flag: paused=%v err=%v", paused, err)
	}
	if p, _ := q1.IsPaused(ctx); p {
		t.Fatal("queue paused without the flag")
	}
	if err := db.Client.Set(ctx, testFlag, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	q2, _ := queue.New(db.Client, fleet.HostQueueName("new2"), queue.Config{})
	paused, err = q2.DeclarePausedIf(ctx, testFlag)
	if err != nil || !paused {
		t.Fatalf("with the flag: paused=%v err=%v", paused, err)
	}
	if p, _ := q2.IsPaused(ctx); !p {
		t.Fatal("queue not paused although the flag is set")
	}
	names, err := queue.Discover(ctx, db.Client, "")
	if err != nil || len(names) != 2 {
		t.Fatalf("declared queues not discoverable: %v %v", names, err)
	}
}

// One transaction sets the flag and pauses every queue; a queue whose meta
// key is junk fails alone and is reported, the others change.
func TestSetPausedWithFlag(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	a, _ := queue.New(db.Client, fleet.HostQueueName("a"), queue.Config{})
	b, _ := queue.New(db.Client, fleet.HostQueueName("b"), queue.Config{})
	c, _ := queue.New(db.Client, fleet.HostQueueName("c"), queue.Config{})
	if err := db.Client.Set(ctx, "bull:pi-jobs@b:meta", "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	out, err := queue.SetPausedWithFlag(ctx, true, testFlag, a, b, c)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flag != nil || out.Queues[0] != nil || out.Queues[1] == nil || out.Queues[2] != nil {
		t.Fatalf("outcome %+v", out)
	}
	for _, q := range []*queue.Queue{a, c} {
		if p, _ := q.IsPaused(ctx); !p {
			t.Fatalf("%s not paused", q.Name())
		}
	}
	if n, _ := db.Client.Exists(ctx, testFlag).Result(); n != 1 {
		t.Fatal("flag not set")
	}
	out, err = queue.SetPausedWithFlag(ctx, false, testFlag, a, c)
	if err != nil || out.Flag != nil || out.Queues[0] != nil || out.Queues[1] != nil {
		t.Fatalf("resume %+v %v", out, err)
	}
	if n, _ := db.Client.Exists(ctx, testFlag).Result(); n != 0 {
		t.Fatal("flag not cleared")
	}
	if p, _ := a.IsPaused(ctx); p {
		t.Fatal("a still paused")
	}
}

// A transaction the server refuses as a whole (a wrongly authenticated or
// unauthenticated connection, a command refused while queued) ran nothing:
// SetPausedWithFlag must say so, either as ErrTxRefused (the refusal is on
// no command: the handshake failed) or as a failure of every part, never as
// a part's success.
func TestSetPausedWithFlagRefusedWhole(t *testing.T) {
	srv := livetest.StartServer(t)
	ctx := context.Background()
	admin := srv.Client()
	// A user who may do everything but run scripts: the pause script is
	// refused while queued, and EXEC answers EXECABORT.
	if err := admin.Do(ctx, "ACL", "SETUSER", "noscript", "on", ">pw2", "~*", "&*", "+@all", "-eval", "-evalsha").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "requirepass", "pw1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		opts    *redis.Options
		refused bool // the error is on no command
	}{
		{"wrong password", &redis.Options{Addr: srv.Addr(), Password: "wrong", MaxRetries: -1}, true},
		{"no password", &redis.Options{Addr: srv.Addr(), MaxRetries: -1}, false},
		{"script refused while queued", &redis.Options{Addr: srv.Addr(), Username: "noscript", Password: "pw2", MaxRetries: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := redis.NewClient(tc.opts)
			defer client.Close()
			a, _ := queue.New(client, fleet.SharedQueue, queue.Config{})
			b, _ := queue.New(client, fleet.HostQueueName("b"), queue.Config{})
			for _, paused := range []bool{true, false} {
				out, err := queue.SetPausedWithFlag(ctx, paused, testFlag, a, b)
				everyPartFailed := err == nil && out.Flag != nil && len(out.Queues) == 2 && out.Queues[0] != nil && out.Queues[1] != nil
				if tc.refused && !errors.Is(err, queue.ErrTxRefused) || !tc.refused && !everyPartFailed {
					t.Fatalf("paused=%t: outcome %+v, err %v", paused, out, err)
				}
			}
		})
	}
	ok, err := valkey.NewClient(srv.URL(), valkey.Options{Password: "pw1"})
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	if n, err := ok.Exists(ctx, testFlag, "bull:pi-jobs:meta", "bull:pi-jobs@b:meta").Result(); err != nil || n != 0 {
		t.Fatalf("a refused transaction changed %d keys (%v)", n, err)
	}
}

// Through the shared constructor the refusal is the connection's, named as
// such: every part failed, nothing ran.
func TestSetPausedWithFlagAuthRefused(t *testing.T) {
	srv := livetest.StartServer(t)
	ctx := context.Background()
	if err := srv.Client().ConfigSet(ctx, "requirepass", "pw1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{"", "wrong"} {
		client, err := valkey.NewClient(srv.URL(), valkey.Options{Password: pw, OneShot: true})
		if err != nil {
			t.Fatal(err)
		}
		q, _ := queue.New(client, fleet.SharedQueue, queue.Config{})
		out, err := queue.SetPausedWithFlag(ctx, true, testFlag, q)
		if !errors.Is(err, valkey.ErrAuthRefused) || out.Queues != nil {
			t.Fatalf("password %q: outcome %+v, err %v", pw, out, err)
		}
		_ = client.Close()
	}
}
