package gateway

import "time"

// CallEvent is one model call the gateway settled: what Config.OnCall
// receives, for transcripts and traces. It carries no key and no body.
type CallEvent struct {
	JobID    string
	Attempt  int
	Provider string
	Model    string
	// Status is the provider's HTTP status; 0 when it never answered.
	Status int
	// Start is when the call reached the gateway, End when it was settled.
	Start, End time.Time
	Usage      Usage
	// Micros is the call's price; Priced is false when the pricing table
	// had no price for the model, Estimated when the provider reported no
	// usage and the bytes were counted instead.
	Micros            int64
	Priced, Estimated bool
}

// callDone tells Config.OnCall about a settled call.
func (s *Session) callDone(c *call, model string, u Usage, micros int64, priced, estimated bool) {
	f := s.g.cfg.OnCall
	if f == nil {
		return
	}
	f(CallEvent{
		JobID: s.job.JobID, Attempt: s.job.Attempt, Provider: c.provider, Model: model, Status: c.status,
		Start: c.start, End: s.g.cfg.Now(), Usage: u, Micros: micros, Priced: priced, Estimated: estimated,
	})
}
