// Package flows is what a job's flow asks of the agent, and the prompt the
// host renders from it (/job/prompt.md, docs/flows.md).
//
// A flow is a Markdown template with an optional front matter naming the
// built-in tools it takes away. The built-ins (default, fix, review,
// answer, plan) are embedded in the package; an operator's own, read from
// PI_FLOWS_DIR by package config, are parsed with Parse and added with
// Catalog.With, overriding a built-in of the same name.
//
// Render puts a job's prompt together: the operator's instructions, the
// flow's template, then the task (the operator's words) or, for a forge
// job, its event as untrusted data: every text in a fenced block labelled
// with who wrote it, that no text can close or forge.
//
// The package is pure: it imports the standard library and jobs only, and
// reads no file besides its own embedded templates.
package flows
