package jobimage_test

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// TestBuildFromScratch proves the image builds with nothing pulled: a single
// layer holding the static program, labelled with its source digest, under
// the tag asked for, and no temporary tag left behind.
func TestBuildFromScratch(t *testing.T) {
	c := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	tag := "pidispatch-test-job:build-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var progress bytes.Buffer
	if err := jobimage.Build(ctx, c, tag, &progress); err != nil {
		t.Fatalf("build: %v\n%s", err, progress.String())
	}
	t.Cleanup(func() {
		_, _ = c.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{Force: true})
	})
	img, err := c.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Config.Labels[jobimage.SourceLabel]; got != jobimage.SourceDigest() {
		t.Fatalf("source label %q, want %q", got, jobimage.SourceDigest())
	}
	if !slices.Equal(img.Config.Entrypoint, []string{"/jobprog"}) {
		t.Fatalf("entrypoint %q", img.Config.Entrypoint)
	}
	if img.RootFS.Type != "layers" || len(img.RootFS.Layers) != 1 {
		t.Fatalf("want exactly one layer (FROM scratch + COPY), got %+v", img.RootFS)
	}
	if !bytes.Contains(progress.Bytes(), []byte("COPY jobprog /jobprog")) {
		t.Fatalf("progress did not show the build steps:\n%s", progress.String())
	}
	list, err := c.ImageList(ctx, client.ImageListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		for _, rt := range s.RepoTags {
			if bytes.HasPrefix([]byte(rt), []byte("pidispatch-jobimage-build:")) && s.ID == img.ID {
				t.Fatalf("temporary tag %s left on the image", rt)
			}
		}
	}
}

// TestEnsureConcurrent proves concurrent Ensure calls all succeed and leave the
// tag naming an image of the current source; once present, Ensure does not
// rebuild (it answers in well under a build's time).
func TestEnsureConcurrent(t *testing.T) {
	c := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() { errs[i] = jobimage.Ensure(ctx, c, jobimage.TestTag) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ensure %d: %v", i, err)
		}
	}
	img, err := c.ImageInspect(ctx, jobimage.TestTag)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config.Labels[jobimage.SourceLabel] != jobimage.SourceDigest() {
		t.Fatal("tag does not name the current program")
	}
	start := time.Now()
	if err := jobimage.Ensure(ctx, c, jobimage.TestTag); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Ensure of a present image took %v; it rebuilt", d)
	}
	again, err := c.ImageInspect(ctx, jobimage.TestTag)
	if err != nil || again.ID != img.ID {
		t.Fatalf("image changed under a no-op Ensure: %v", err)
	}
}
