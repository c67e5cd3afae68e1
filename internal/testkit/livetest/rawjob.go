package livetest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RawJob writes job id on queue q as a party that can write to Valkey but
// holds no host's keys would: BullMQ's layout straight with go-redis (HSET
// the job hash, LPUSH its id, wake the consumers). data is the job data as
// given, opts {"attempts":1}; fields are more hash fields and override
// those (a later HSET field wins).
func RawJob(t testing.TB, c redis.UniversalClient, q, id, data string, fields ...any) {
	t.Helper()
	ctx := context.Background()
	prefix := "bull:" + q + ":"
	args := append([]any{"name", "pi-job", "data", data, "opts", `{"attempts":1}`,
		"timestamp", strconv.FormatInt(time.Now().UnixMilli(), 10)}, fields...)
	if err := c.HSet(ctx, prefix+id, args...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.LPush(ctx, prefix+"wait", id).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAdd(ctx, prefix+"marker", redis.Z{Score: 0, Member: "0"}).Err(); err != nil {
		t.Fatal(err)
	}
}
