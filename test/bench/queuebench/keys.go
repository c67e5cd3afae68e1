package queuebench

import "github.com/pidispatch/pidispatch/fleet"

// This file is the only place the bench names Valkey keys or queues. Our
// queue's keys are formatted by package queue itself; BullMQ's by the Node
// program; asynq's by asynq. The bench reads two of asynq's keys to learn
// when its last task is acknowledged.

// Queue names used by each system.
const (
	ourQueue    = fleet.SharedQueue // "pi-jobs": keys bull:pi-jobs:*
	bullmqQueue = "pi-jobs"         // passed to bench.js: the same keys
	asynqQueue  = "default"
	asynqTask   = "noop"
)

// asynqPendingKey and asynqActiveKey are asynq v0.26's lists of ready and
// running tasks of a queue (internal/base: "asynq:{<q>}:pending|active").
func asynqPendingKey(q string) string { return "asynq:{" + q + "}:pending" }
func asynqActiveKey(q string) string  { return "asynq:{" + q + "}:active" }
