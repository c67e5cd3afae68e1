package jobs

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClipRemovesControlAndFormatCharactersAndCutsVisibly(t *testing.T) {
	in := "a\x00b\x1bc\u200dd\u202ee\u2066f\r\ng\th\xff"
	got := Clip(in, 100)
	if want := "abcdef\ng\th\uFFFD"; got != want {
		t.Fatalf("Clip = %q, want %q", got, want)
	}
	long := strings.Repeat("é", 1000) // two bytes each
	cut := Clip(long, 101)
	if len(cut) > 101 || !strings.HasSuffix(cut, "\n"+Truncated) || !utf8.ValidString(cut) {
		t.Fatalf("cut %d bytes, %q...", len(cut), cut[len(cut)-20:])
	}
	if Clip("short", 5) != "short" {
		t.Fatal("a text at its limit was cut")
	}
	if ClipName("a\nb\tc") != "a b c" {
		t.Fatalf("ClipName = %q", ClipName("a\nb\tc"))
	}
}

func TestForgeEventIDsAndLabelAreBounded(t *testing.T) {
	base := Job{Kind: KindForge, Repo: "acme/api", Flow: "fix", Task: "t", ForgeEvent: ForgeEvent{Forge: ForgeGitHub, Number: 1}}
	for name, mod := range map[string]func(*ForgeEvent){
		"negative comment": func(f *ForgeEvent) { f.CommentID = -1 },
		"label newline":    func(f *ForgeEvent) { f.Label = "a\nb" },
		"label long":       func(f *ForgeEvent) { f.Label = strings.Repeat("x", MaxEventNameBytes+1) },
	} {
		j := base
		mod(&j.ForgeEvent)
		if j.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := base
	ok.CommentID, ok.ReviewID, ok.ActorID, ok.Label = 7, 8, 9, "pi: fix"
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}
