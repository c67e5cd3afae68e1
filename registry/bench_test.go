package registry

import (
	"context"
	"testing"

	"github.com/pidispatch/pidispatch/internal/livetest"
)

// BenchmarkReadLive1000 reads a 1,000-host registry. A counting hook proves one
// round trip per read.
func BenchmarkReadLive1000(b *testing.B) {
	db := livetest.Valkey(b)
	seedRows(b, db.Client, 1000)
	c := clientOf(b, db.Client, nil)
	hook := &countingHook{}
	c.AddHook(hook)
	ctx := context.Background()
	if _, err := ReadLive(ctx, c, 0); err != nil { // loads the script
		b.Fatal(err)
	}
	hook.n.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		hosts, err := ReadLive(ctx, c, 0)
		if err != nil {
			b.Fatal(err)
		}
		if len(hosts) != 1000 {
			b.Fatalf("read %d hosts, want 1000", len(hosts))
		}
	}
	b.StopTimer()
	if got := hook.n.Load(); got != int64(b.N) {
		b.Fatalf("%d commands for %d reads: not one round trip each", got, b.N)
	}
	b.ReportMetric(float64(hook.n.Load())/float64(b.N), "roundtrips/op")
}
