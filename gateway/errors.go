package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// failure is one kind of answer the gateway gives itself, in both API
// shapes: Anthropic's error type, OpenAI's error type and code.
type failure struct {
	status               int
	anthropic, oai, code string
}

var (
	failNoKey       = failure{http.StatusUnauthorized, "authentication_error", "invalid_request_error", "invalid_api_key"}
	failUnknown     = failure{http.StatusNotFound, "not_found_error", "invalid_request_error", "unknown_provider"}
	failTooLarge    = failure{http.StatusRequestEntityTooLarge, "request_too_large", "invalid_request_error", "request_too_large"}
	failCostCap     = failure{http.StatusBadRequest, "invalid_request_error", "insufficient_quota", "cost_cap"}
	failTokenCap    = failure{http.StatusBadRequest, "invalid_request_error", "insufficient_quota", "token_cap"}
	failRateLimited = failure{http.StatusTooManyRequests, "rate_limit_error", "requests", "rate_limit_exceeded"}
	failClosed      = failure{http.StatusServiceUnavailable, "api_error", "server_error", "session_closed"}
	failUpstream    = failure{http.StatusBadGateway, "api_error", "server_error", "upstream_unreachable"}
	// failTooMany is a job past its concurrent calls: a 429 the agent waits
	// out and retries.
	failTooMany         = failure{http.StatusTooManyRequests, "rate_limit_error", "requests", "too_many_concurrent_calls"}
	failBadRequest      = failure{http.StatusBadRequest, "invalid_request_error", "invalid_request_error", "invalid_request"}
	failModelNotAllowed = failure{http.StatusForbidden, "permission_error", "invalid_request_error", "model_not_allowed"}
)

// Shapes of the providers' APIs.
const (
	shapeAnthropic = "anthropic"
	shapeOpenAI    = "openai"
)

// shapeOf is the API a provider speaks: anthropic's Messages, every other
// provider OpenAI-compatible chat completions.
func shapeOf(provider string) string {
	if provider == "anthropic" {
		return shapeAnthropic
	}
	return shapeOpenAI
}

// writeError answers as the provider would, so the agent reads the message.
func writeError(w http.ResponseWriter, shape string, f failure, msg string) {
	var body any
	if shape == shapeAnthropic {
		body = map[string]any{"type": "error", "error": map[string]string{"type": f.anthropic, "message": msg}}
	} else {
		body = map[string]any{"error": map[string]any{"message": msg, "type": f.oai, "code": f.code, "param": nil}}
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(f.status)
	_, _ = w.Write(b)
}
