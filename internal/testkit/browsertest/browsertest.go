// Package browsertest drives a real headless Chromium for tests of the pages
// the binaries serve (chromedp over the DevTools protocol).
//
// Without Chromium a test skips; with PIDISPATCH_REQUIRE_LIVE=1 (set by
// .ci/run, which installs Debian's chromium) it fails instead.
package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// Environment variables read here.
const (
	// EnvChromium names the browser binary; unset, the usual paths are tried.
	EnvChromium = "PIDISPATCH_CHROMIUM"
	// EnvArtifacts, when set, is a directory that receives a copy of every
	// screenshot, for a person or CI to look at.
	EnvArtifacts = "PIDISPATCH_ARTIFACTS"
)

// Path finds the Chromium binary.
func Path() (string, error) {
	if p := os.Getenv(EnvChromium); p != "" {
		return exec.LookPath(p)
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("chromium not found (install Debian's chromium, or set %s)", EnvChromium)
}

// Browser is one headless Chromium of a test.
type Browser struct {
	// Ctx runs chromedp actions in the browser's first tab.
	Ctx context.Context

	mu      sync.Mutex
	dialogs []string
	accept  bool
}

// Chromium starts a headless Chromium that ends with the test (or after
// timeout). It skips without Chromium, or fails with PIDISPATCH_REQUIRE_LIVE=1.
// Every dialog the page opens (window.confirm) is recorded and dismissed,
// or accepted after AcceptDialogs.
func Chromium(t testing.TB, timeout time.Duration) *Browser {
	t.Helper()
	livetest.SkipShort(t)
	bin, err := Path()
	if err != nil {
		if livetest.Required() {
			t.Fatalf("live service required (%s=1): %v", livetest.EnvRequire, err)
		}
		t.Skipf("live service unavailable: %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancelTimeout := context.WithTimeout(context.Background(), timeout)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		cancelTimeout()
		wg.Wait()
	})
	if err := chromedp.Do(bctx); err != nil { // starts the browser and its tab
		t.Fatalf("start chromium %s: %v", bin, err)
	}
	b := &Browser{Ctx: bctx}
	dialogs := chromedp.Events(bctx, page.JavascriptDialogOpening)
	wg.Go(func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: b.opened(ev.Message)})
		}
	})
	return b
}

// AcceptDialogs makes the browser answer OK to every window.confirm (and
// alert) from now on.
func (b *Browser) AcceptDialogs() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.accept = true
}

// Dialogs is every dialog message the page opened, in order.
func (b *Browser) Dialogs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dialogs...)
}

// opened records a dialog and says whether to accept it.
func (b *Browser) opened(msg string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dialogs = append(b.dialogs, msg)
	return b.accept
}

// WaitText waits until the page's visible text contains every one of texts.
func WaitText(timeout time.Duration, texts ...string) chromedp.Action[chromedp.Void] {
	raw, _ := json.Marshal(texts)
	expr := fmt.Sprintf(`(() => { const t = document.body ? document.body.innerText : ''; return %s.every((s) => t.includes(s)); })()`, raw)
	poll := chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := poll(ctx, t)
		if err != nil {
			text, _ := chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`)(ctx, t)
			return chromedp.Void{}, fmt.Errorf("waiting for %s on the page: %w; the page shows:\n%s", raw, err, text[:min(len(text), 4000)])
		}
		return chromedp.Void{}, nil
	}
}

// Screenshot takes a full-page screenshot, writes it to the test's temp
// folder (and to PIDISPATCH_ARTIFACTS when set) as name.png, and requires a
// PNG that is not blank. It returns the file's path.
func Screenshot(t testing.TB, b *Browser, name string) string {
	t.Helper()
	buf, err := chromedp.Run(b.Ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := CheckPNG(buf); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(t.TempDir(), name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv(EnvArtifacts); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		file := strings.ReplaceAll(t.Name(), "/", "_") + "-" + name + ".png"
		if err := os.WriteFile(filepath.Join(dir, file), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// CheckPNG requires buf to be a PNG of at least 200x200 pixels holding more
// than one colour (a page that rendered, not a blank surface).
func CheckPNG(buf []byte) error {
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		return fmt.Errorf("not a PNG: %w", err)
	}
	r := img.Bounds()
	if r.Dx() < 200 || r.Dy() < 200 {
		return fmt.Errorf("only %dx%d pixels", r.Dx(), r.Dy())
	}
	if colours(img, 16) < 3 {
		return fmt.Errorf("blank: fewer than 3 colours")
	}
	return nil
}

// colours counts distinct colours on a grid of step pixels, up to 16.
func colours(img image.Image, step int) int {
	seen := map[[4]uint32]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y += step {
		for x := r.Min.X; x < r.Max.X; x += step {
			cr, cg, cb, ca := img.At(x, y).RGBA()
			seen[[4]uint32{cr, cg, cb, ca}] = true
			if len(seen) >= 16 {
				return len(seen)
			}
		}
	}
	return len(seen)
}
