package queue

import (
	"context"
	"fmt"
	"strconv"
)

// Layout is the BullMQ key layout a queue speaks, named by BullMQ's major
// version. The two differ in pause alone: BullMQ 6 pauses with the meta
// "paused" flag and leaves ready jobs in the wait list, in order; BullMQ 5
// also moves them to the paused list (and back on resume, overwriting wait),
// which BullMQ 6 no longer reads. Each queue follows the layout its meta's
// "version" field names (BullMQ writes "bullmq:<version>" whenever a Queue
// is constructed; we write "pidispatch:bullmq<n>" when nobody has), so one
// fleet can hold queues of both.
type Layout int

// The layouts.
const (
	Layout6 Layout = 6
	Layout5 Layout = 5
)

// DefaultLayout is the layout a worker or producer records on new queues
// unless configured otherwise (Config.Layout).
const DefaultLayout = Layout6

// ParseLayout reads a layout as configured: "6" or "5".
func ParseLayout(s string) (Layout, error) {
	switch s {
	case "6":
		return Layout6, nil
	case "5":
		return Layout5, nil
	}
	return 0, fmt.Errorf("queue: layout %q: must be 6 or 5 (the BullMQ major version the queue's Node clients run)", s)
}

func (l Layout) String() string { return strconv.Itoa(int(l)) }

// version is the meta "version" we write for l.
func (l Layout) version() string { return "pidispatch:bullmq" + l.String() }

var layoutLuaScript = buildScript("layout.lua")

// Layout reports the layout the queue follows now: the one its meta's
// version names, else Config.Layout (which this call then records there),
// else 6.
func (q *Queue) Layout(ctx context.Context) (Layout, error) {
	return q.layout(ctx, "")
}

// SetLayout moves the queue to layout l in one atomic call: its meta
// version becomes ours for l, and when the queue is paused its ready jobs
// move to where l keeps them, in order. It is the step of a move from
// BullMQ 5 to 6 for a queue no BullMQ 6 Queue has been constructed on yet
// (one that is rewrites the version itself). A BullMQ client of the other
// major that constructs a Queue afterwards writes its own version back, so
// move the Node clients first. It returns the layout before the call.
func (q *Queue) SetLayout(ctx context.Context, l Layout) (Layout, error) {
	if l != Layout6 && l != Layout5 {
		return 0, optErr("layout", "must be 6 or 5")
	}
	before, err := q.layout(ctx, "")
	if err != nil || before == l {
		return before, err
	}
	if _, err := q.layout(ctx, l.String()); err != nil {
		return before, err
	}
	return before, nil
}

func (q *Queue) layout(ctx context.Context, set string) (Layout, error) {
	res, err := q.run(ctx, layoutLuaScript, nil, set)
	if err != nil {
		return 0, fmt.Errorf("layout of %s: %w", q.name, err)
	}
	n, _ := res.(int64)
	if n != int64(Layout6) && n != int64(Layout5) {
		return 0, fmt.Errorf("layout of %s: unexpected reply %v", q.name, res)
	}
	return Layout(n), nil
}
