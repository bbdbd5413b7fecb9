package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestServiceMonitorComponentSelectsTheDataPlane builds config/default with
// the ServiceMonitor component, as a user's overlay would, and checks that the
// ServiceMonitor selects the data-plane Service and scrapes a port it has.
func TestServiceMonitorComponentSelectsTheDataPlane(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		kubectl = "../../bin/k8s/kubectl"
		if _, err := os.Stat(kubectl); err != nil {
			t.Skip("no kubectl on PATH or in bin/k8s; `make envtest` builds one")
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	// kustomize refuses absolute paths: name both relative to the overlay.
	base, err := filepath.Rel(overlay, filepath.Join(root, "config/default"))
	if err != nil {
		t.Fatal(err)
	}
	component, err := filepath.Rel(overlay, filepath.Join(root, "config/prometheus/servicemonitor"))
	if err != nil {
		t.Fatal(err)
	}
	kust := "resources:\n- " + base + "\ncomponents:\n- " + component + "\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "kustomize", overlay).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize with the component: %v\n%s", err, out)
	}
	type object struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port string `json:"port"`
			} `json:"endpoints"`
			Ports []struct {
				Name string `json:"name"`
			} `json:"ports"`
		} `json:"spec"`
	}
	var monitors, services []object
	for doc := range strings.SplitSeq(string(out), "\n---\n") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		switch o.Kind {
		case "ServiceMonitor":
			monitors = append(monitors, o)
		case "Service":
			services = append(services, o)
		}
	}
	if len(monitors) != 1 {
		t.Fatalf("%d ServiceMonitors rendered, want 1", len(monitors))
	}
	m := monitors[0]
	var matched []object
	for _, s := range services {
		ok := s.Metadata.Namespace == m.Metadata.Namespace
		for k, v := range m.Spec.Selector.MatchLabels {
			ok = ok && s.Metadata.Labels[k] == v
		}
		if ok {
			matched = append(matched, s)
		}
	}
	if len(matched) != 1 || !strings.HasSuffix(matched[0].Metadata.Name, "dataplane") {
		t.Fatalf("the ServiceMonitor in %q selects %d Services (%v), want the data plane's", m.Metadata.Namespace, len(matched), matched)
	}
	for _, e := range m.Spec.Endpoints {
		found := false
		for _, p := range matched[0].Spec.Ports {
			found = found || p.Name == e.Port
		}
		if !found {
			t.Errorf("the ServiceMonitor scrapes port %q, which Service %s does not name", e.Port, matched[0].Metadata.Name)
		}
	}
}
