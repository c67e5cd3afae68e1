package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/queue"
)

// A producer adds a job that may retry once after a minute, is kept for a
// day when done, and cannot be added twice for the same delivery.
func ExampleQueue_Add() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	q, err := queue.New(client, fleet.SharedQueue, queue.Config{})
	if err != nil {
		panic(err)
	}
	id, added, err := q.Add(ctx, "run", json.RawMessage(`{"folder":"/srv/repo"}`), queue.AddOptions{
		JobID:            "gh-8d2f",
		Attempts:         2,
		Backoff:          queue.Backoff{Type: queue.BackoffExponential, Delay: time.Minute},
		RemoveOnComplete: queue.Keep{Age: 24 * time.Hour},
	})
	fmt.Println(id, added, err)
}

// A worker drains the shared queue and its own host queue, sleeping on both
// at once when there is nothing to do.
func ExampleConsumer() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	shared, _ := queue.New(client, fleet.SharedQueue, queue.Config{WorkerName: "mini"})
	own, _ := queue.New(client, fleet.HostQueueName("mini"), queue.Config{WorkerName: "mini"})
	_ = own.Declare(ctx) // visible to Discover before its first job
	c, err := queue.NewConsumer([]*queue.Queue{shared, own}, queue.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	for {
		q, job, err := c.Next(ctx, queue.NewToken())
		if err != nil {
			return
		}
		// ... run it, calling q.ExtendLock every LockTTL/2 ...
		if err := q.Complete(ctx, job.ID, job.Token, json.RawMessage(`{"exit":0}`)); err != nil {
			fmt.Println(err)
		}
	}
}

// A cron scheduler runs a job at 03:00 Amsterdam time every day; its one
// pending run is a delayed job.
func ExampleQueue_UpsertScheduler() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	q, _ := queue.New(client, fleet.HostQueueName("mini"), queue.Config{})
	pending, err := q.UpsertScheduler(ctx, "nightly-audit", queue.Scheduler{
		Pattern: "0 3 * * *",
		TZ:      "Europe/Amsterdam",
		JobName: "run",
		Data:    json.RawMessage(`{"flow":"audit"}`),
	})
	fmt.Println(pending, err)
}

func ExampleValidateQueueName() {
	fmt.Println(queue.ValidateQueueName(fleet.HostQueueName("mini-1")))
	fmt.Println(queue.ValidateQueueName("pi-jobs@evil:name") != nil)
	// Output:
	// <nil>
	// true
}

func ExampleNextRun() {
	after := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	next, _ := queue.NextRun("0 9 * * 1-5", "Asia/Tokyo", after)
	fmt.Println(next.UTC())
	// Output: 2026-01-02 00:00:00 +0000 UTC
}
