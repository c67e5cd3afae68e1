package agentimage

import (
	"slices"
	"testing"
)

func TestParseLdd(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f98)\n" +
		"\tlibmissing.so => not found\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f98)\n"
	got := parseLdd(out)
	want := []string{"/lib/x86_64-linux-gnu/libstdc++.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if !slices.Equal(got, want) {
		t.Fatalf("parseLdd = %q, want %q", got, want)
	}
}
