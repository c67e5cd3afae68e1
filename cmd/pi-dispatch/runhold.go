package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/registry"
)

// noteHold tells the operator, after `run` queued a job, that it will not
// start until a resume (the fleet or its queue is paused). Best effort: a
// failed read says nothing, since the job is queued either way.
func noteHold(ctx context.Context, e env, client *redis.Client, queueName string) {
	hold, err := operator.PauseHold(ctx, client, queueName)
	if err != nil || hold == "" {
		return
	}
	fmt.Fprintf(e.stderr, "note: %s, so this job waits until `pi-dispatch resume`\n", hold)
}

// blockingFindings are the explain findings that mean a queued job cannot
// start as things stand: no worker will take it, or one will refuse it.
var blockingFindings = []string{
	operator.FindNoHosts, operator.FindHostGone, operator.FindHostStale, operator.FindNotCapable,
	operator.FindInvalidJob, operator.FindBudgetFull, operator.FindDollarsFull, operator.FindImageMissing,
	operator.FindRateLimited, operator.FindPauseWindow,
}

// warnCannotStart tells the operator, after `run` queued a job, what explain
// knows will keep it from starting (a full count or dollar window, no live
// worker for its queue, its image on no live host), by explain's own rules,
// and when this unnamed host's job sits on the shared queue that named
// hosts drain too (a local folder job would run on another machine). Best
// effort: a failed read says nothing.
func warnCannotStart(ctx context.Context, e env, client *redis.Client, cfg config.Config, jobID, queueName string) {
	opts, err := operator.ExplainOptionsFromConfig(cfg)
	if err != nil {
		return
	}
	opts.Sources = append(opts.Sources, operator.SpendSources(client, cfg)...)
	if ex, err := operator.Explain(ctx, client, jobID, opts); err == nil {
		for _, f := range ex.Findings {
			if slices.Contains(blockingFindings, f.Code) {
				fmt.Fprintf(e.stderr, "warning: %s (pi-dispatch explain %s)\n", f.Words, jobID)
			}
		}
	}
	if cfg.WorkerNameDeclared || queueName != fleet.SharedQueue {
		return
	}
	rows, err := registry.ReadLive(ctx, client, runEnqueueTimeout)
	if err != nil {
		return
	}
	var named []string
	for _, r := range rows {
		if r.Routes && r.Name != cfg.WorkerName { // a row that routes is a declared name
			named = append(named, r.Name)
		}
	}
	if len(named) > 0 {
		fmt.Fprintf(e.stderr, "warning: this host has no PI_WORKER_NAME, so the job went to the shared queue %s, which named hosts (%s) drain too: "+
			"it may run on another machine, where its folder is not. Set PI_WORKER_NAME in this host's .env (docs/fleet.md)\n",
			fleet.SharedQueue, strings.Join(named, ", "))
	}
}
