package jobs

import (
	"errors"
	"strings"
	"testing"
)

func TestParseJobForgeFields(t *testing.T) {
	j, err := ParseJob([]byte(`{"kind":"forge","repo":"acme/app","flow":"fix","task":"t","forge":"github","repoId":1296269,"number":7,"pullRequest":true,"deliveryId":"72d3162e-cc78-11e3-81ab-4c9367dc0958","trigger":"fix-label","instructions":"be brief","replica":2,"replicas":3}`))
	if err != nil {
		t.Fatal(err)
	}
	want := ForgeEvent{Forge: ForgeGitHub, RepoID: 1296269, Number: 7, PullRequest: true, DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Trigger: "fix-label", Instructions: "be brief", Replica: 2, Replicas: 3}
	if j.ForgeEvent != want {
		t.Fatalf("forge fields = %+v, want %+v", j.ForgeEvent, want)
	}
}

func TestParseJobRefusesBadForgeFields(t *testing.T) {
	base := `"kind":"forge","repo":"acme/app","flow":"fix","task":"t"`
	for _, tc := range []struct{ extra, field string }{
		{`"forge":"bitbucket"`, "forge"},
		{`"number":7`, "forge"},
		{`"forge":"github","number":-1`, "number"},
		{`"forge":"github","repoId":-1`, "repoId"},
		{`"forge":"github","repoId":9007199254740992`, "repoId"},
		{`"forge":"github","pullRequest":true`, "pullRequest"},
		{`"forge":"github","deliveryId":"a b"`, "deliveryId"},
		{`"forge":"github","deliveryId":"` + strings.Repeat("a", 129) + `"`, "deliveryId"},
		{`"forge":"github","trigger":"../x"`, "trigger"},
		{`"forge":"github","replicas":4,"replica":1`, "replicas"},
		{`"forge":"github","replicas":2,"replica":3`, "replica"},
		{`"forge":"github","replica":1`, "replicas"},
	} {
		_, err := ParseJob([]byte(`{` + base + `,` + tc.extra + `}`))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%s: err = %v, want a %s field error", tc.extra, err, tc.field)
		}
	}
	_, err := ParseJob([]byte(`{"kind":"local","folder":"/w","flow":"fix","task":"t","forge":"github"}`))
	if err == nil {
		t.Error("a folder job with forge fields was accepted")
	}
}
