// Package chart draws the demo's PNG chart: each tenant's share of admitted
// requests per second as a solid line, its weighted share as a dashed line of
// the same colour, and vertical markers at events such as a weight change.
package chart

import (
	"errors"
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// MaxPoints bounds the length of every series, so a chart never holds more
// than MaxPoints points per line (an hour of per-second samples).
const MaxPoints = 3600

// Tenant is one tenant's lines on the chart.
type Tenant struct {
	// Name labels the tenant in the legend.
	Name string
	// Share is the tenant's measured share of admitted requests, one value
	// in [0, 1] per second; NaN marks a second with nothing admitted.
	Share []float64
	// Weighted is the tenant's weighted share in force, one value per second.
	Weighted []float64
}

// Marker is a vertical line at an event.
type Marker struct {
	// At is the event's offset in seconds from the start of the series.
	At float64
	// Label names the event in the legend.
	Label string
}

// Shares is the content of one chart.
type Shares struct {
	// Title is printed above the plot.
	Title string
	// Tenants holds one entry per tenant, drawn in order.
	Tenants []Tenant
	// Markers are drawn as grey vertical lines.
	Markers []Marker
}

// Validate reports what makes s unplottable.
func (s *Shares) Validate() error {
	var errs []error
	if len(s.Tenants) == 0 {
		errs = append(errs, errors.New("chart has no tenant: give at least one"))
	}
	for i, t := range s.Tenants {
		if len(t.Share) > MaxPoints || len(t.Weighted) > MaxPoints {
			errs = append(errs, fmt.Errorf("tenant %d (%s) has %d share and %d weighted points: at most %d each", i, t.Name, len(t.Share), len(t.Weighted), MaxPoints))
		}
	}
	return errors.Join(errs...)
}

// Plot builds the chart.
func (s *Shares) Plot() (*plot.Plot, error) {
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

// WritePNG draws the chart into a PNG file at path, 10 by 5 inches.
func (s *Shares) WritePNG(path string) error {
	p, err := s.Plot()
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
