// Package cicheck holds .ci/run to the programs the project's code and tests
// execute or look up: a program a test needs that .ci/run does not install
// passes on a developer's machine and fails on a fresh one. It has no code;
// its test is the check.
package cicheck
