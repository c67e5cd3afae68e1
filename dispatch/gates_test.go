package dispatch

import (
	"context"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestGateOrder pins the ladder: each gate's name and the method it runs, in
// order. A reorder changes what a job is refused or deferred for, and
// whether anything is spent first, so it must be a conscious change here.
func TestGateOrder(t *testing.T) {
	want := []string{
		"job-id (*Worker).gateJobID",
		"attempts (*Worker).gateAttempts",
		"job-data (*Worker).gateJobData",
		"job-signed (*Worker).gateJobSigned",
		"flow (*Worker).gateFlow",
		"forge (*Worker).gateForge",
		"image-allowed (*Worker).gateImageAllowed",
		"folder (*Worker).gateFolder",
		"cron (*Worker).gateCron",
		"pause-window (*Worker).gatePauseWindow",
		"secret-profile (*Worker).gateSecretProfile",
		"wait-profile (*Worker).gateWaitProfiles",
		"hold (*Worker).gateHold",
		"rate-limit (*Worker).gateRateLimit",
		"thread (*Worker).gateThread",
		"scope-slot (*Worker).gateScopeSlot",
		"predicted (*Worker).gatePredicted",
		"budget (*Worker).gateBudget",
		"dollars (*Worker).gateDollars",
		"image (*Worker).gateImage",
		"secrets (*Worker).gateSecrets",
	}
	var got []string
	for _, g := range gates {
		fn := runtime.FuncForPC(reflectPC(g.check)).Name()
		got = append(got, g.name+" "+fn[strings.LastIndex(fn, "dispatch.")+len("dispatch."):])
	}
	if !slices.Equal(got, want) {
		t.Errorf("gates:\n got %q\nwant %q", got, want)
	}
}

// TestClimbStopsAndReleases: the walk stops at the first gate that does not
// let the job go on, never asks a later one, and releases what the gates
// before it took, last taken first, with the run's started flag.
func TestClimbStopsAndReleases(t *testing.T) {
	var calls, released []string
	taking := func(name string) gate {
		return gate{name, func(*Worker, context.Context, *held) verdict {
			calls = append(calls, name)
			return verdict{act: actGoOn, release: func(started bool) {
				released = append(released, name+map[bool]string{true: "+started", false: ""}[started])
			}}
		}}
	}
	stopping := func(name string, act action) gate {
		return gate{name, func(*Worker, context.Context, *held) verdict {
			calls = append(calls, name)
			return verdict{act: act}
		}}
	}
	w, h := &Worker{}, &held{}

	stop, release := w.climb(context.Background(), h, []gate{
		taking("slot"), stopping("plain", actGoOn), taking("money"), stopping("hold", actDefer), taking("never"),
	})
	if stop.act != actDefer || h.gate != "hold" {
		t.Errorf("stopped with %v at %q, want the fourth gate's deferral", stop.act, h.gate)
	}
	if !slices.Equal(calls, []string{"slot", "plain", "money", "hold"}) {
		t.Errorf("gates asked: %q", calls)
	}
	if len(released) != 0 {
		t.Errorf("released before the handling ended: %q", released)
	}
	release(false)
	if !slices.Equal(released, []string{"money", "slot"}) {
		t.Errorf("released %q, want money then slot", released)
	}

	calls, released = nil, nil
	stop, release = w.climb(context.Background(), h, []gate{taking("slot"), taking("money")})
	if stop.act != actGoOn || !slices.Equal(calls, []string{"slot", "money"}) {
		t.Errorf("stopped with %v after %q, want every gate passed", stop.act, calls)
	}
	release(true)
	if !slices.Equal(released, []string{"money+started", "slot+started"}) {
		t.Errorf("released %q", released)
	}
}

func reflectPC(f func(*Worker, context.Context, *held) verdict) uintptr {
	return reflect.ValueOf(f).Pointer()
}
