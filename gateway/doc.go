// Package gateway is the model gateway: the host end of a job's model
// socket. The agent in the container holds only a placeholder key; each of
// its model calls goes through a Session, which
//
//   - forwards /<provider>/<rest> to the provider's base URL + /<rest> (the
//     query kept), with only the headers the provider needs (an allow-list:
//     no header the container sent can carry a credential) and the job's key
//     for that provider (x-api-key for anthropic, Authorization: Bearer for
//     every other provider). A provider the job holds no key for is answered
//     401; a provider without an upstream 404; a model outside AllowedModels
//     403. None is forwarded.
//   - runs at most MaxCalls calls of a job at once (more are answered 429)
//     and reads a body of at most MaxBodyBytes within BodyTimeout.
//   - passes the response through unchanged and unbuffered: server-sent
//     events are flushed to the container as they arrive.
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
// the micro-dollars. Its basis is metered while every call's cost came
// from the provider's closing usage report. A call whose answer ended
// without it (cut by Close, or by a hang-up past DrainTimeout), or that was
// sent and never answered, is charged its whole reservation (see Caps), or
// without a cap the estimate of its bytes (input = request bytes/4, output
// = response bytes/4), and the basis becomes estimated. When the container
// hangs up mid-answer, the call goes on reading the provider's answer for
// at most DrainTimeout to meter it. A call in flight counts at its
// reservation until it settles. A model the pricing table does not know is
// listed in Unpriced: its tokens are counted, its dollars are not.
//
// # Caps
//
// Before it forwards a call of a job with a cap, the session reserves the
// call's worst case, from the request alone:
//
//	input  = request bytes + InputOverheadTokens
//	         + ImageTokens per image block + DocumentTokens per document
//	         block not sent as text, at the model's dearest input price
//	output = the request's bound (max_tokens, max_completion_tokens,
//	         max_output_tokens; the largest; times n), at its output price
//
// The spend plus the reservations in flight never pass MaxMicros or
// MaxTokens: an output bound the caps cannot afford, or a missing one, is
// lowered (set) to what they afford (at most DefaultOutputTokens when
// missing), splicing the body; when not even MinOutputTokens fit, the call
// is refused (reason cost-cap or token-cap): an HTTP 400 in the provider's
// shape, which sets Spend().CapHit, and every later call of the job is
// refused the same way. A request whose input cannot be bounded (server
// tools, stored conversations) is refused alone. With a dollar cap, a
// model the table does not price is refused (cost-cap). A call the
// provider bills past its reservation is recorded whole, its excess added
// to Spend().OvershootMicros, and the job's later calls are refused.
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
