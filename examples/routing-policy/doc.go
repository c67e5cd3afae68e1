// Package routingpolicy is an example: a deployment unit-tests its own
// routing policy (which host's queue a forge job lands on) with
// capabilities.Route and no Valkey at all. The tests are the example; see
// policy_test.go.
package routingpolicy
