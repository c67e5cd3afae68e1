package runner

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestOutputFileKeepsTail writes chunks of every size around the cap and
// checks the file is always the newest output, never more than the cap.
func TestOutputFileKeepsTail(t *testing.T) {
	const max = 1000
	r := rand.New(rand.NewPCG(1, 2))
	for _, chunkMax := range []int{1, 7, 300, 999, 1000, 2500} {
		path := filepath.Join(t.TempDir(), "out")
		o, err := createOutputFile(path, max)
		if err != nil {
			t.Fatal(err)
		}
		var all []byte
		for range 200 {
			p := make([]byte, 1+r.IntN(chunkMax))
			for i := range p {
				p[i] = byte('a' + r.IntN(26))
			}
			all = append(all, p...)
			if n, err := o.Write(p); n != len(p) || err != nil {
				t.Fatalf("write: %d %v", n, err)
			}
		}
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > max || !bytes.HasSuffix(all, got) || len(got) < min(len(all), max/2) {
			t.Fatalf("chunks up to %d: kept %d bytes of %d, suffix %v", chunkMax, len(got), len(all), bytes.HasSuffix(all, got))
		}
	}
}
