package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/internal/image/agentimage"
	"github.com/pidispatch/pidispatch/internal/testkit/fakeprovider"
	"github.com/pidispatch/pidispatch/jobs"
)

// Settings of the --agent demo: the real pi coding agent against a scripted
// fake provider on this machine, reached through the job's model socket.
const (
	demoAgentTimeout   = 15 * time.Minute // the first image assembly installs pi with npm
	demoAgentJobMemory = int64(1) << 30
	demoAgentJobTime   = 5 * time.Minute
	demoAgentModel     = "claude-haiku-4-5"
	demoAgentTask      = "Write hello.txt in the workspace, saying hello."
	demoAgentContent   = "hello from pi, through the model socket\n"
)

// startDemoProvider starts the fake provider the demo agent talks to: one
// tool call writing the demo file, then a final answer.
// demoProviderKey is the stand-in key the demo's gateway holds for the fake
// provider.
const demoProviderKey = "sk-demo-fake-provider"

func startDemoProvider() (*fakeprovider.Server, error) {
	return fakeprovider.Listen(
		fakeprovider.WriteFile("/workspace/"+demoFile, demoAgentContent, fakeprovider.Usage{Input: 1200, Output: 40, CacheRead: 300, CacheWrite: 100}),
		fakeprovider.Answer("I wrote "+demoFile+" in the workspace.", fakeprovider.Usage{Input: 1300, Output: 12, CacheRead: 1500}),
	)
}

// startAgentProvider, with --agent, starts the fake provider the agent's model calls reach and points the worker and job at it.
func (d *demo) startAgentProvider(cfg *config.Config, job *jobs.Job) (*fakeprovider.Server, int) {
	if !d.agent {
		return nil, exitOK
	}
	fp, err := startDemoProvider()
	if err != nil {
		return nil, d.fail("start the fake provider: %v", err)
	}
	d.atReturn(func() { _ = fp.Close() })
	d.say("fake model provider on %s (the job reaches it only through its model socket)", fp.URL())
	cfg.ModelUpstream, cfg.JobMemory, cfg.JobTimeout = fp.URL(), demoAgentJobMemory, demoAgentJobTime
	// The gateway adds this key to each model call on the host side; the
	// fake provider takes any key, the container never sees one.
	cfg.Gateway.ProviderKeys = map[string]string{"anthropic": demoProviderKey}
	job.Task, job.Model = demoAgentTask, demoAgentModel
	return fp, exitOK
}

// ensureAgentImage assembles the offline agent image when it is missing or
// stale, printing each step and the elapsed time while it works.
func (d *demo) ensureAgentImage(ctx context.Context, dc *client.Client) error {
	d.say("preparing the agent image %s (pi from agent/image/package-lock.json; nothing is pulled)...", agentimage.Tag)
	start := time.Now()
	done := make(chan error, 1)
	steps := make(chan string, 16)
	go func() {
		done <- agentimage.Ensure(ctx, dc, agentimage.Tag, func(format string, args ...any) {
			select {
			case steps <- fmt.Sprintf(format, args...):
			default:
			}
		})
	}()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				d.say("agent image %s ready after %ds", agentimage.Tag, int(time.Since(start).Seconds()))
			}
			return err
		case s := <-steps:
			d.say("  %s", s)
		case <-tick.C:
			d.say("  still working (%ds)", int(time.Since(start).Seconds()))
		}
	}
}

// agentSummary prints what the agent's run cost against what the fake
// provider reported.
func (d *demo) agentSummary(rec jobs.Record, fp *fakeprovider.Server) {
	var tel struct {
		Turns    int    `json:"turns"`
		Provider string `json:"provider"`
		Model    string `json:"model"`
		Tokens   struct {
			Total int64 `json:"total"`
		} `json:"tokens"`
		Cost float64 `json:"cost"`
	}
	_ = json.Unmarshal(rec.Telemetry, &tel)
	reported, answers := fp.Reported()
	d.say("\npi ran %d turns on %s/%s with network %q: %d tokens, $%.6f", tel.Turns, tel.Provider, tel.Model, rec.Network, tel.Tokens.Total, tel.Cost)
	d.say("(the fake provider reported %d tokens in %d answers; nothing was spent)", reported.Total(), answers)
	if s := rec.Spend; s != nil {
		d.say("the worker's gateway metered %d calls, %d tokens, $%s (%s), with the key held on this host",
			s.Calls, s.Tokens.Total(), jobs.FormatUSD(s.Micros), s.Basis)
	}
}
