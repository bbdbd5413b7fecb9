// Package chart holds the content of the demo's chart: each tenant's share of
// admitted requests per second, its weighted share, and markers at events
// such as a weight change. hack/demo draws it (with gonum plot, kept out of
// the product's go.mod by hack/demo's own module).
package chart

import (
	"errors"
	"fmt"
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
