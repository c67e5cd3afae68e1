// Package docscheck holds tests over the documentation that ships with the
// module: the README, docs/ and examples/. It has no code of its own.
package docscheck
