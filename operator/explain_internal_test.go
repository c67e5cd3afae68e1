package operator

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// The findings table of docs/operations.md lists every code in the order
// Explain sorts them.
func TestFindingsTableMatchesTheRanking(t *testing.T) {
	raw, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z][a-z-]*)` \\|").FindAllStringSubmatch(string(raw), -1) {
		codes = append(codes, m[1])
	}
	if !slices.Equal(codes, findingRank) {
		t.Fatalf("docs/operations.md lists\n%v\nExplain ranks\n%v", codes, findingRank)
	}
}
