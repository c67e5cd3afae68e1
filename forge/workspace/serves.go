package workspace

import "github.com/pidispatch/pidispatch/jobs"

// Serves reports whether the manager holds a credential for forge: a job of
// another forge is refused before anything is spent.
func (m *Manager) Serves(forge jobs.Forge) bool {
	_, ok := m.cfg.Forges[forge]
	return ok
}
