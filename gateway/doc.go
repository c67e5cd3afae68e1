// Package gateway is the model gateway: the host end of a job's model
// socket. The agent in the container holds only a placeholder key; each of
// its model calls goes through a Session, which
//
//   - forwards /<provider>/<rest> to the provider's base URL + /<rest> (the
//     query kept), with the job's key for that provider in place of any key
//     the container sent (x-api-key for anthropic, Authorization: Bearer for
//     every other provider). A provider the job holds no key for is answered
//     401; a provider without an upstream 404. Neither is forwarded.
//   - passes the request and the response through unchanged and unbuffered:
//     server-sent events are flushed to the container as they arrive.
//   - meters each response as it streams through: the usage of Anthropic
//     Messages (the JSON body's usage; message_start and the cumulative
//     message_delta of a stream), OpenAI chat completions (usage with
//     prompt_tokens_details.cached_tokens; the final chunk of a stream sent
//     with stream_options.include_usage) and OpenAI Responses
//     (response.completed), priced with a Pricing table.
//   - refuses a call that would cross the job's dollar or token cap, and
//     holds or refuses a call to a provider the fleet has suspended for a
//     rate limit.
//
// # Spend
//
// A Session's Spend counts the calls forwarded and refused, the tokens and
// the micro-dollars. Its basis is metered while every successful call
// reported its usage; a successful call that reported none is estimated at
// input = request bytes/4 and output = response body bytes/4 tokens, and the
// basis becomes estimated. A model the pricing table does not know is listed
// in Unpriced: its tokens are counted, its dollars are not, so the dollars
// are then a lower bound.
//
// # Caps
//
// Before it forwards a call the session estimates the call's cost:
//
//	input  = max(request bytes / 4, the previous call's input + cacheRead + cacheWrite tokens)
//	output = the previous call's output tokens (0 for the first call)
//	cost   = input at the model's input price + output at its output price
//
// (an agent's next request holds at least the whole previous conversation;
// the input is priced as uncached, so the estimate errs high). The call is
// refused when spent + the estimates of the calls in flight + this estimate
// exceed MaxMicros (reason cost-cap), or when the tokens so far, in flight
// and estimated exceed MaxTokens (token-cap). With a dollar cap set, a call
// to a model the table does not price is refused at once (cost-cap): its
// cost could not be checked. A refusal is an HTTP 400 in the provider's
// shape, an invalid request the agent does not retry, naming the cap and
// the spend; it sets Spend().CapHit, and every later call of the job is
// refused the same way.
//
// # Rate limits
//
// A 429 or 529 answer with a reset (retry-after in seconds or as an HTTP
// date; else the latest of anthropic-ratelimit-*-reset, RFC 3339, and
// x-ratelimit-reset-requests/-tokens, durations such as "1s" or "6m0s") is
// recorded with RateLimits.Suspend and passed through unchanged. Before a
// call is forwarded, a suspension of its provider that ends within
// RateLimitWait is waited out (until the container gives up or the session
// closes); a later one is answered 429 with retry-after. A RateLimits that
// cannot be read lets calls through (logged once per session).
//
// # Pricing
//
// A pricing table is text, one model a line:
//
//	# provider  model              input  output  cacheRead  cacheWrite
//	anthropic   claude-sonnet-4-5  3      15      0.3        3.75
//	openrouter  *                  1      4       0          0
//
// Prices are dollars per million tokens, plain digits with up to 6
// decimals. Fields are separated by spaces or tabs; "#" starts a comment;
// blank lines are ignored. The model "*" prices every model of its provider
// that no line names. A provider or model priced twice in one file is an
// error; a bad line's error names its number and rule ("pricing line 7:
// ..."). DefaultPricing is the built-in table (pricing.txt, from the pi
// coding agent's model catalogue); LoadPricing merges a file over it. A call
// is priced in exact integer micro-dollars, rounded half up once per call.
//
// The key is never logged, echoed nor written anywhere but the upstream
// request's header.
package gateway
