// Package dispatchtest holds in-memory implementations of every collaborator
// of a dispatch.Worker (queue and source, registry, leases, budget, dollar
// windows, rate limits, holds, run mirror, cancels, container runtime, queue
// directory), and a conformance
// suite (the Test* functions) that the fakes and the Valkey and Docker
// implementations all pass, so a test on the fakes says something about the
// real stack.
//
// The stores come together as a fleet driver (dispatch.Fleet): NewFleet is
// the fake one, whose hosts share one state, and Exercise runs every
// store's suite against any driver, the fake one and stack's Valkey one
// alike. MakeFleet builds n Workers on one fake fleet, for tests of what
// hosts do together.
//
// The fakes run no goroutine of their own and link no client code: a test of
// the Worker on them needs no Valkey and no Docker. Each is safe for
// concurrent use. The contracts they follow are the interfaces' in
// dispatch/deps.go, dispatch/held.go and dispatch/spend.go, as docs/architecture.md describes.
package dispatchtest
