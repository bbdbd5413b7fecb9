package render_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"sigs.k8s.io/yaml"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/reload"
	"github.com/fairqueue/fairqueue/dataplane/render"
)

// A policy read from a file never passes through the API server, so the
// CRD's +kubebuilder:default values are not filled in. The standalone data
// plane relies on Render applying the same defaults itself. These tests
// apply the generated CRD's defaults with the API server's own structural
// defaulting and check that rendering the defaulted policy gives the same
// bytes as rendering the policy as written.

const crdPath = "../../config/crd/bases/fairqueue.dev_fairqueuepolicies.yaml"

// skeleton has every optional object present with only its required fields,
// so every default of the CRD applies somewhere in it.
const skeleton = `apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata: {name: skeleton, namespace: ns}
spec:
  identity:
    keyRegistry:
      secretRef: {name: registry}
  rateLimits:
    global: {requests: 10}
    perClient: {requests: 10}
    perAPIKey: {requests: 10}
    perUser: {requests: 10}
    perTeam: {requests: 10}
    perModel:
      requests: 10
      overrides:
      - model: m
        requests: 5
      unknownModel: {}
    perBackend: {requests: 10}
  fairQueuing:
    enabled: true
    weights:
    - identity: alice
      weight: 2
  deferredAdmission:
    enabled: true
    tokenLimits:
      perAPIKey: {tokens: 1000}
      perUser: {tokens: 1000}
      perTeam: {tokens: 1000}
      perModel:
        tokens: 1000
        overrides:
        - model: m
          tokens: 500
  timeouts:
    request:
      models:
      - model: m
        total: 30s
  store:
    type: Redis
    redis:
      addresses: ["redis:6379"]
  backends:
  - name: b
    url: http://b:8000
  capacity:
    backends:
    - name: b
      maxInFlight: 8
      saturation:
        signals:
        - metric: vllm:num_requests_waiting
          max: 0.5
---
apiVersion: v1
kind: Secret
metadata: {name: registry, namespace: ns}
stringData:
  keys.json: '[{"apiKey": "k1", "user": "alice"}]'
`

func crdSchema(t *testing.T) *structuralschema.Structural {
	t.Helper()
	data, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatalf("reading the generated CRD: %v", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatalf("decoding the CRD: %v", err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != fqv1alpha1.GroupVersion.Version {
			continue
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			t.Fatal(err)
		}
		s, err := structuralschema.NewStructural(&internal)
		if err != nil {
			t.Fatalf("the CRD schema is not structural: %v", err)
		}
		return s
	}
	t.Fatalf("the CRD has no version %s", fqv1alpha1.GroupVersion.Version)
	return nil
}

// apiDefaulted returns what the API server stores for the policy: the CRD's
// defaults applied to it.
func apiDefaulted(t *testing.T, s *structuralschema.Structural, p *fqv1alpha1.FairQueuePolicy) (*fqv1alpha1.FairQueuePolicy, map[string]any) {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	structuraldefaulting.Default(obj, s)
	out, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	d := &fqv1alpha1.FairQueuePolicy{}
	if err := json.Unmarshal(out, d); err != nil {
		t.Fatal(err)
	}
	return d, obj
}

func TestRenderAppliesTheCRDDefaults(t *testing.T) {
	s := crdSchema(t)
	samples, err := filepath.Glob("../../config/samples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string][]byte{"skeleton": []byte(skeleton)}
	secrets, err := reload.ReadSecrets("../../config/samples")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range samples {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("kind: FairQueuePolicy")) {
			docs[filepath.Base(f)] = data
		}
	}
	if len(docs) < 3 {
		t.Fatalf("found %d policies (samples and skeleton), want at least 3", len(docs))
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	for name, data := range docs {
		t.Run(name, func(t *testing.T) {
			p, own, err := reload.DecodePolicy(data)
			if err != nil {
				t.Fatal(err)
			}
			for n, sec := range own {
				secrets[n] = sec
			}
			d, _ := apiDefaulted(t, s, p)
			if reflect.DeepEqual(d.Spec, p.Spec) && name != "fairqueue_v1alpha1_fairqueuepolicy_full.yaml" {
				t.Fatalf("the CRD defaults changed nothing in %s; the comparison would prove nothing", name)
			}
			asWritten, err := render.Render(render.Input{Policy: p, HashKey: key, HashKeySecret: p.HashKeySecretName(), Secrets: secrets})
			if err != nil {
				t.Fatalf("rendering the policy as written: %v", err)
			}
			asStored, err := render.Render(render.Input{Policy: d, HashKey: key, HashKeySecret: d.HashKeySecretName(), Secrets: secrets})
			if err != nil {
				t.Fatalf("rendering the API-defaulted policy: %v", err)
			}
			if !bytes.Equal(asWritten.Data, asStored.Data) {
				t.Errorf("rendering without the API server differs from rendering what it stores:\nas written:\n%s\nAPI-defaulted:\n%s", asWritten.Data, asStored.Data)
			}
		})
	}
}

// TestSkeletonCoversEveryDefault fails when the CRD gains a default the
// skeleton does not exercise, so the comparison above keeps covering all.
func TestSkeletonCoversEveryDefault(t *testing.T) {
	s := crdSchema(t)
	p, _, err := reload.DecodePolicy([]byte(skeleton))
	if err != nil {
		t.Fatal(err)
	}
	_, obj := apiDefaulted(t, s, p)
	var paths []string
	var walk func(path string, s *structuralschema.Structural)
	walk = func(path string, s *structuralschema.Structural) {
		if s == nil {
			return
		}
		if s.Default.Object != nil {
			paths = append(paths, path)
		}
		for name, prop := range s.Properties {
			walk(path+"."+name, &prop)
		}
		if s.Items != nil {
			walk(path+"[]", s.Items)
		}
	}
	walk("", s)
	sort.Strings(paths)
	if len(paths) < 10 {
		t.Fatalf("found %d defaults in the CRD, expected the dozen or more of the +kubebuilder:default markers", len(paths))
	}
	for _, path := range paths {
		if !present(obj, path) {
			t.Errorf("the CRD default at %s is not exercised by the skeleton policy; add its parent object to it", path)
		}
	}
}

// present reports whether path (".a.b[].c") exists in obj, in every element
// of the lists it crosses.
func present(obj any, path string) bool {
	if path == "" {
		return obj != nil
	}
	path = path[1:]
	field, rest := path, ""
	for i := 0; i < len(path); i++ {
		if path[i] == '.' || path[i] == '[' {
			field, rest = path[:i], path[i:]
			break
		}
	}
	m, ok := obj.(map[string]any)
	if !ok {
		return false
	}
	v, ok := m[field]
	if !ok {
		return false
	}
	if len(rest) >= 2 && rest[:2] == "[]" {
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return false
		}
		for _, e := range list {
			if !present(e, rest[2:]) {
				return false
			}
		}
		return true
	}
	return present(v, rest)
}
