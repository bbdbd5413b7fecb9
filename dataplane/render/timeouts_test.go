package render

import (
	"testing"
	"time"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

func TestRenderTimeoutsCarriesTheClientDeadlineHeader(t *testing.T) {
	got := renderTimeouts(&fqv1alpha1.RequestTimeouts{
		Default:              fqv1alpha1.RequestTimeout{Total: fqv1alpha1.Duration("1m")},
		Models:               []fqv1alpha1.ModelRequestTimeout{{Model: "fast", Total: fqv1alpha1.Duration("10s")}},
		ClientDeadlineHeader: "X-Request-Deadline",
	})
	if got.ClientDeadlineHeader != "X-Request-Deadline" {
		t.Errorf("ClientDeadlineHeader = %q, want X-Request-Deadline", got.ClientDeadlineHeader)
	}
	if len(got.Models) != 1 || got.Models[0].Model != "fast" || got.Models[0].Total.Duration != 10*time.Second {
		t.Errorf("Models = %+v, want the fast model's 10s", got.Models)
	}
}
