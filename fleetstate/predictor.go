package fleetstate

import (
	"context"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/jobs/predict"
)

// Defaults of a Predictor.
const (
	// DefaultPredictRefresh is how often a Predictor reads the mirror again
	// at most: jobs between two reads share one table.
	DefaultPredictRefresh = time.Minute
	// DefaultPredictHistory is how far back the runs it reads go.
	DefaultPredictHistory = 30 * 24 * time.Hour
)

// PredictorConfig tunes a Predictor. The zero value is valid.
type PredictorConfig struct {
	// MinRuns is PI_PREDICT_MIN_RUNS (0: predict.DefaultMinRuns).
	MinRuns int
	// Refresh bounds how often the mirror is read (DefaultPredictRefresh);
	// History how far back (DefaultPredictHistory); ReadLimit how many
	// attempts one read takes at most (DefaultMirrorIndexMax, the most the
	// index keeps).
	Refresh   time.Duration
	History   time.Duration
	ReadLimit int
	// Now is the clock of the refresh and the history (time.Now).
	Now func() time.Time
}

// Predictor predicts a job's cost from the fleet's recent runs in the run
// mirror (package jobs/predict holds the rule). It reads the mirror at most
// once per Refresh, in one bounded read, and answers every job in between
// from that table, so predicting costs no Valkey call per job. A read that
// fails keeps the last table and is not tried again before Refresh.
//
// A Predictor is safe for concurrent use.
type Predictor struct {
	mirror *Mirror
	cfg    PredictorConfig

	mu    sync.Mutex
	table *predict.Table
	read  time.Time // when the mirror was last read (zero: never)
	err   error     // the last read's error, while no table was ever read
}

var _ dispatch.CostPredictor = (*Predictor)(nil)

// NewPredictor returns a Predictor over mirror.
func NewPredictor(mirror *Mirror, cfg PredictorConfig) *Predictor {
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultPredictRefresh
	}
	if cfg.History <= 0 {
		cfg.History = DefaultPredictHistory
	}
	if cfg.ReadLimit <= 0 {
		cfg.ReadLimit = DefaultMirrorIndexMax
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Predictor{mirror: mirror, cfg: cfg}
}

// Predict is the prediction for a job of trigger, flow and repo from the
// table, read again first when it is older than Refresh. false: too little
// history. An error means the mirror could not be read and no earlier read
// succeeded.
func (p *Predictor) Predict(ctx context.Context, trigger, flow, repo string) (jobs.Prediction, bool, error) {
	t, err := p.current(ctx)
	if t == nil {
		return jobs.Prediction{}, false, err
	}
	pr, ok := t.Predict(trigger, flow, repo)
	return pr, ok, nil
}

// current is the table, refreshed when due. Callers wait for a refresh in
// flight rather than read the mirror themselves.
func (p *Predictor) current(ctx context.Context) (*predict.Table, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	if !p.read.IsZero() && now.Sub(p.read) < p.cfg.Refresh {
		return p.table, p.err
	}
	p.read = now
	recs, _, err := p.mirror.Read(ctx, p.cfg.ReadLimit, now.Add(-p.cfg.History))
	if err != nil {
		if p.table == nil {
			p.err = err
		}
		return p.table, p.err
	}
	p.table, p.err = predict.Build(recs, p.cfg.MinRuns), nil
	return p.table, nil
}
