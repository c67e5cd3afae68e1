// Package policy holds the worker's policy files as values: pause windows
// (pause-windows.json) and scoped limits (scoped-limits.json), with their
// strict parsers. It is pure: it parses the bytes it is given and reads no
// file, clock or environment (package config reads the files).
package policy
