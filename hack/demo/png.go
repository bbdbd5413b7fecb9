package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/fairqueue/fairqueue/internal/chart"
)

// plotShares builds the chart: each tenant's share as a solid line, its
// weighted share as a dashed line of the same colour, markers as grey
// vertical lines.
func plotShares(s *chart.Shares) (*plot.Plot, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	p := plot.New()
	p.Title.Text = s.Title
	p.X.Label.Text = "seconds since load started"
	p.Y.Label.Text = "share of admitted requests"
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true

	dashes := []vg.Length{vg.Points(6), vg.Points(4)}
	for i, t := range s.Tenants {
		c := plotutil.Color(i)
		if pts := steps(t.Weighted); len(pts) > 0 {
			l, err := plotter.NewLine(pts)
			if err != nil {
				return nil, fmt.Errorf("tenant %s weighted share: %w", t.Name, err)
			}
			l.Color, l.Width, l.Dashes = c, vg.Points(1.5), dashes
			p.Add(l)
		}
		if pts := points(t.Share); len(pts) > 0 {
			l, err := plotter.NewLine(pts)
			if err != nil {
				return nil, fmt.Errorf("tenant %s share: %w", t.Name, err)
			}
			// Earlier tenants are drawn wider, so a line that coincides
			// with a later one still shows at its edges.
			l.Color, l.Width = c, vg.Points(2+1.5*float64(len(s.Tenants)-1-i))
			p.Add(l)
			p.Legend.Add(t.Name, l)
		}
	}
	// One legend entry explains every dashed line.
	key, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}})
	if err != nil {
		return nil, err
	}
	key.Color, key.Width, key.Dashes = color.Gray{Y: 80}, vg.Points(1.5), dashes
	p.Legend.Add("weighted share (dashed)", key)
	for _, m := range s.Markers {
		l, err := plotter.NewLine(plotter.XYs{{X: m.At, Y: 0}, {X: m.At, Y: 1}})
		if err != nil {
			return nil, fmt.Errorf("marker %q: %w", m.Label, err)
		}
		l.Color, l.Width = color.Gray{Y: 110}, vg.Points(1.5)
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(l)
		p.Legend.Add(m.Label, l)
	}
	return p, nil
}

// writePNG draws the chart into a PNG file at path, 10 by 5 inches.
func writePNG(s *chart.Shares, path string) error {
	p, err := plotShares(s)
	if err != nil {
		return err
	}
	if err := p.Save(10*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("writing chart %s: %w", path, err)
	}
	return nil
}

// steps turns per-second values into a step line: each value holds from
// the start to the end of its second, skipping NaN seconds.
func steps(v []float64) plotter.XYs {
	pts := make(plotter.XYs, 0, 2*len(v))
	for i, y := range v {
		if math.IsNaN(y) || math.IsInf(y, 0) {
			continue
		}
		pts = append(pts, plotter.XY{X: float64(i), Y: y}, plotter.XY{X: float64(i + 1), Y: y})
	}
	return pts
}

// points turns per-second values into plot points at the middle of each
// second, skipping NaN seconds.
func points(v []float64) plotter.XYs {
	pts := make(plotter.XYs, 0, len(v))
	for i, y := range v {
		if math.IsNaN(y) || math.IsInf(y, 0) {
			continue
		}
		pts = append(pts, plotter.XY{X: float64(i) + 0.5, Y: y})
	}
	return pts
}
