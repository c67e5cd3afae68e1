package hostfolder

import "testing"

func TestParseUser(t *testing.T) {
	for v, want := range map[string]string{
		"": UserOwner, "owner": UserOwner, "image": UserImage, "root": "0:0",
		"1000:1001": "1000:1001", "0:0": "0:0", "4294967294:1": "4294967294:1",
	} {
		got, rule := ParseUser(v)
		if got != want || rule != "" {
			t.Errorf("ParseUser(%q) = %q, %q; want %q", v, got, rule, want)
		}
		if UserRule(v) != "" {
			t.Errorf("UserRule(%q) = %q", v, UserRule(v))
		}
	}
	for _, v := range []string{"1000", "1000:", ":1000", "01:1", "-1:1", "+1:1", "4294967295:1", "99999999999:1", "a:b", "Owner", "root:root", " 1:1"} {
		got, rule := ParseUser(v)
		if got != "" || rule == "" {
			t.Errorf("ParseUser(%q) = %q, %q; want a rule", v, got, rule)
		}
	}
}
