// Package config is the worker's configuration: every environment variable
// it reads, with its parser, default, bounds and documentation row
// (docs/configuration.md). Load parses the environment strictly and reports
// every bad variable at once as ConfigErrors; Config.Worker reads the policy
// files and hands the Worker its typed, file-free dispatch.Config.
//
// It imports no backend: a front-end, doctor or a test may load and check a
// configuration without a Valkey client or Docker.
package config
