package config

import (
	"net/url"
	"time"

	"github.com/pidispatch/pidispatch/internal/check"
)

// Transcript, notification and tracing settings (docs/logs-and-notifications.md).
const (
	// DefaultOnFailureTimeout bounds one run of PI_ON_FAILURE.
	DefaultOnFailureTimeout = 10 * time.Second
	// MaxOnFailureTimeout bounds PI_ON_FAILURE_TIMEOUT_MS.
	MaxOnFailureTimeout = 10 * time.Minute
	// DefaultTranscriptMaxBytes bounds a stored transcript, uncompressed.
	DefaultTranscriptMaxBytes = 8 << 20
	// MinTranscriptMaxBytes and MaxTranscriptMaxBytes bound PI_TRANSCRIPT_MAX_BYTES.
	MinTranscriptMaxBytes = 64 << 10
	MaxTranscriptMaxBytes = 1 << 30
)

// reportEnvVars are the variables of this file, in EnvVars order.
var reportEnvVars = []string{
	"PI_TRANSCRIPT_MAX_BYTES",
	"PI_ON_FAILURE",
	"PI_ON_FAILURE_TIMEOUT_MS",
	"PI_NOTIFY_URL",
	"OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
}

func init() { EnvVars = append(EnvVars, reportEnvVars...) }

// Report holds what a worker keeps and tells about its jobs: transcripts,
// the failure hook, the webhook and traces.
type Report struct {
	// TranscriptMaxBytes bounds each attempt's stored transcript,
	// uncompressed; past it only the output's end is kept.
	// PI_TRANSCRIPT_MAX_BYTES, 65536..1073741824, defaults to 8 MiB.
	TranscriptMaxBytes int
	// OnFailure is a program run on every failure, with the arguments
	// <jobId> <outcome> <reason> <host>. PI_ON_FAILURE, an absolute path;
	// unset by default.
	OnFailure string
	// OnFailureTimeout bounds one run of OnFailure.
	// PI_ON_FAILURE_TIMEOUT_MS, 1..600000, defaults to 10 s.
	OnFailureTimeout time.Duration
	// NotifyURL receives a small JSON event on a failure, a cap hit, a
	// provider suspended, the fleet paused or resumed. PI_NOTIFY_URL, an
	// http:// or https:// URL; never logged (a webhook URL often holds a token).
	NotifyURL string
	// OTLPEndpoint is set when traces are exported: the value of
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT.
	// The OpenTelemetry SDK reads its other OTEL_* variables itself.
	OTLPEndpoint string
}

func (r *envReader) readReport(c *Config) {
	r.envInt("PI_TRANSCRIPT_MAX_BYTES", &c.Report.TranscriptMaxBytes)
	r.envText("PI_ON_FAILURE", &c.Report.OnFailure)
	r.envMillis("PI_ON_FAILURE_TIMEOUT_MS", &c.Report.OnFailureTimeout)
	r.envText("PI_NOTIFY_URL", &c.Report.NotifyURL)
	r.envText("OTEL_EXPORTER_OTLP_ENDPOINT", &c.Report.OTLPEndpoint)
	r.envText("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &c.Report.OTLPEndpoint)
}

// reportProblems checks the typed report fields. The zero values of a
// Config built in code mean the defaults.
func (c Config) reportProblems(p *problemList) {
	r := c.Report
	if r.TranscriptMaxBytes != 0 {
		p.intRange("PI_TRANSCRIPT_MAX_BYTES", r.TranscriptMaxBytes, MinTranscriptMaxBytes, MaxTranscriptMaxBytes)
	}
	if r.OnFailure != "" {
		if rule := check.AbsClean(r.OnFailure); rule != "" {
			p.add("PI_ON_FAILURE", r.OnFailure, rule)
		}
	}
	if r.OnFailureTimeout != 0 {
		p.durRange("PI_ON_FAILURE_TIMEOUT_MS", r.OnFailureTimeout, time.Millisecond, MaxOnFailureTimeout, true)
	}
	if rule := notifyURLRule(r.NotifyURL); rule != "" {
		p.add("PI_NOTIFY_URL", "(not shown)", rule)
	}
}

// notifyURLRule returns "" for a usable webhook URL.
func notifyURLRule(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return "must be an http:// or https:// URL with a host"
	case len(raw) > 2048:
		return "must be at most 2048 bytes"
	}
	return ""
}

// OnFailureTimeoutOr is OnFailureTimeout, or its default when zero.
func (r Report) OnFailureTimeoutOr() time.Duration {
	if r.OnFailureTimeout == 0 {
		return DefaultOnFailureTimeout
	}
	return r.OnFailureTimeout
}

// TranscriptMax is TranscriptMaxBytes, or its default when zero.
func (r Report) TranscriptMax() int {
	if r.TranscriptMaxBytes == 0 {
		return DefaultTranscriptMaxBytes
	}
	return r.TranscriptMaxBytes
}
