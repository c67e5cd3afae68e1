package browsertest

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

func encode(t *testing.T, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// CheckPNG refuses what a broken page would give: no PNG, a tiny one, one
// colour.
func TestCheckPNGRefusesBlankAndTiny(t *testing.T) {
	blank := image.NewRGBA(image.Rect(0, 0, 400, 400))
	if err := CheckPNG(encode(t, blank)); err == nil {
		t.Fatal("blank image accepted")
	}
	if err := CheckPNG(encode(t, image.NewRGBA(image.Rect(0, 0, 50, 50)))); err == nil {
		t.Fatal("tiny image accepted")
	}
	if err := CheckPNG([]byte("not a png")); err == nil {
		t.Fatal("junk accepted")
	}
	busy := image.NewRGBA(image.Rect(0, 0, 400, 400))
	for y := range 400 {
		for x := range 400 {
			busy.Set(x, y, color.RGBA{uint8(x), uint8(y), 0, 255})
		}
	}
	if err := CheckPNG(encode(t, busy)); err != nil {
		t.Fatal(err)
	}
}

// stopTB records how a helper ended the test: Fatalf or Skipf, each ending
// the goroutine as the real ones do.
type stopTB struct {
	testing.TB
	how, msg string
}

func (s *stopTB) Helper() {}
func (s *stopTB) Fatalf(format string, args ...any) {
	s.how, s.msg = "fatal", fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (s *stopTB) Skipf(format string, args ...any) {
	s.how, s.msg = "skip", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Without Chromium the test skips, and fails when live services are required.
func TestMissingChromiumFailsWhenRequired(t *testing.T) {
	livetest.SkipShort(t) // Chromium skips every -short run before it looks
	t.Setenv(EnvChromium, "/nonexistent/chromium")
	for _, tc := range []struct{ require, want string }{{"1", "fatal"}, {"", "skip"}} {
		t.Setenv(livetest.EnvRequire, tc.require)
		s := &stopTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Chromium(s, time.Second)
		}()
		<-done
		if s.how != tc.want || !strings.Contains(s.msg, "/nonexistent/chromium") {
			t.Errorf("%s=%q: ended by %s %q, want %s", livetest.EnvRequire, tc.require, s.how, s.msg, tc.want)
		}
	}
}
