package config

import "testing"

// The trust settings parse strictly and refuse what would widen them.
func TestTrustConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := Load(env(map[string]string{
		"PI_FOLDER_ROOTS": "/srv/a:/srv/b", "PI_JOB_IMAGES": "pi-job:next,ghcr.io/acme/x:1",
		"PI_SECRET_PROFILES": "prod:/usr/local/bin/r", "PI_SECRET_NETWORK_PROFILES": "prod", "PI_CONTAINER_USER": "owner",
	}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Worker()
	if err != nil {
		t.Fatal(err)
	}
	if len(w.FolderRoots) != 2 || !w.ImageAllowed("ghcr.io/acme/x:1") || w.ImageAllowed("evil:1") || !w.ImageAllowed(c.JobImage) ||
		!w.SecretNetworkAllowed("prod") || w.SecretNetworkAllowed("other") || !w.ContainerUserExplicit {
		t.Fatalf("config %+v", c)
	}
	for _, bad := range []map[string]string{
		{"PI_FOLDER_ROOTS": "relative"},
		{"PI_FOLDER_ROOTS": "/"},
		{"PI_FOLDER_ROOTS": "/a::/b"},
		{"PI_FOLDER_ROOTS": "/a/../b"},
		{"PI_FOLDER_ROOTS": "/a:/a"},
		{"PI_JOB_IMAGES": "UPPER:case"},
		{"PI_SECRET_NETWORK_PROFILES": "prod"},
	} {
		if _, err := Load(env(bad)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if c, _ := Load(env(nil)); c.ContainerUserExplicit || len(c.FolderRoots) != 0 {
		t.Fatalf("defaults %+v", c)
	}
}
