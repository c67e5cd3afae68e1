package browsertest

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"testing"
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
