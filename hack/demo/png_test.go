package main

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairqueue/fairqueue/internal/chart"
)

func TestWritePNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shares.png")
	s := chart.Shares{
		Title: "test",
		Tenants: []chart.Tenant{
			{Name: "a", Share: []float64{0.2, math.NaN(), 0.6}, Weighted: []float64{0.2, 0.2, 0.6}},
			{Name: "b", Share: []float64{0.8, 0.5, 0.4}, Weighted: []float64{0.8, 0.8, 0.4}},
		},
		Markers: []chart.Marker{{At: 1.5, Label: "weight change"}},
	}
	if err := writePNG(&s, path); err != nil {
		t.Fatalf("writePNG: %v", err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() }) // read-only: a close error loses nothing
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("written file is not a PNG: %v", err)
	}
	b := img.Bounds()
	if b.Dx() < 600 || b.Dy() < 300 {
		t.Errorf("chart is %dx%d pixels, want at least 600x300 to be readable", b.Dx(), b.Dy())
	}
	// A chart with lines has more than one colour.
	first := img.At(b.Min.X, b.Min.Y)
	varied := false
	for x := b.Min.X; x < b.Max.X && !varied; x += 7 {
		for y := b.Min.Y; y < b.Max.Y; y += 7 {
			if img.At(x, y) != first {
				varied = true
				break
			}
		}
	}
	if !varied {
		t.Error("chart is a single colour: nothing was drawn")
	}
}

func TestWritePNGRefusesAnInvalidChart(t *testing.T) {
	err := writePNG(&chart.Shares{}, filepath.Join(t.TempDir(), "x.png"))
	if err == nil || !strings.Contains(err.Error(), "no tenant") {
		t.Errorf("writePNG of a chart without tenants: %v, want Validate's error", err)
	}
}
