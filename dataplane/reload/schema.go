package reload

import (
	"context"
	_ "embed" // the CRD the API server validates policies with
	"fmt"
	"net/url"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

// crdYAML is config/crd/bases/fairqueue.dev_fairqueuepolicies.yaml, copied
// here by `make manifests` (a Go package cannot embed a file outside its
// directory); TestEmbeddedCRDIsCurrent fails when the copy is stale.
//
//go:embed fairqueuepolicy_crd.yaml
var crdYAML []byte

// policySchema is the FairQueuePolicy schema of the CRD, ready to validate
// with: the structural schema, its OpenAPI validator and its CEL rules
// (compiled once, which takes a moment).
type policySchema struct {
	structural *structuralschema.Structural
	openAPI    apiservervalidation.SchemaCreateValidator
	cel        *cel.Validator
}

var loadPolicySchema = sync.OnceValues(func() (*policySchema, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(crdYAML, &crd); err != nil {
		return nil, fmt.Errorf("the embedded FairQueuePolicy CRD: %w", err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != fqv1alpha1.GroupVersion.Version || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			return nil, fmt.Errorf("the embedded FairQueuePolicy CRD: %w", err)
		}
		s, err := structuralschema.NewStructural(&internal)
		if err != nil {
			return nil, fmt.Errorf("the embedded FairQueuePolicy CRD: %w", err)
		}
		openAPI, _, err := apiservervalidation.NewSchemaValidator(&internal)
		if err != nil {
			return nil, fmt.Errorf("the embedded FairQueuePolicy CRD: %w", err)
		}
		return &policySchema{structural: s, openAPI: openAPI, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}, nil
	}
	return nil, fmt.Errorf("the embedded FairQueuePolicy CRD has no schema for %s", fqv1alpha1.GroupVersion)
})

// validateAsAPIServer checks a FairQueuePolicy document (JSON) as the API
// server checks one on create: it fills the CRD's defaults, then applies
// its OpenAPI schema (minimum, maximum, lengths, patterns, enums), the
// list-type invariants and the CEL rules, and returns the errors in the API
// server's words, each naming its field (SPEC 10: a policy the API server
// would refuse is refused by --policy with the same field and message).
func validateAsAPIServer(doc []byte) error {
	ps, err := loadPolicySchema()
	if err != nil {
		return err
	}
	var obj map[string]any
	// utiljson decodes numbers as int64 where they are integers, as the API
	// server does, so integer fields validate as integers.
	if err := utiljson.Unmarshal(doc, &obj); err != nil {
		return err
	}
	// As the API server decodes a custom resource: nulls of fields that are
	// not nullable are dropped (so "backends: null" is a missing required
	// field), then the defaults are filled.
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, ps.structural)
	structuraldefaulting.Default(obj, ps.structural)
	errs := apiservervalidation.ValidateCustomResource(nil, obj, ps.openAPI)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, ps.structural, obj)...)
	if ps.cel != nil {
		if blocking := blockingError(errs); blocking != nil {
			errs = append(errs, blocking)
		} else {
			celErrs, _ := ps.cel.Validate(context.Background(), nil, ps.structural, obj, nil, celconfig.RuntimeCELCostBudget)
			errs = append(errs, celErrs...)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	for _, e := range errs {
		e.BadValue = redactURL(e.BadValue)
	}
	return &SchemaError{Errs: errs}
}

// redactURL replaces the password of a URL value by "xxxxx", so a refusal
// of a backend URL that holds credentials does not print them.
func redactURL(v any) any {
	s, ok := v.(string)
	if !ok || !strings.Contains(s, "@") {
		return v
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return v
	}
	return u.Redacted()
}

// blockingError is the API server's note when an error keeps the CEL rules
// from being checked (an absent required field, a wrong type, a value too
// long), as its custom resource strategy words it.
func blockingError(errs field.ErrorList) *field.Error {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")
		}
	}
	return nil
}

// SchemaError is a policy the API server would refuse: its errors are the
// API server's, one per field.
type SchemaError struct {
	Errs field.ErrorList
}

func (e *SchemaError) Error() string {
	return "the API server would refuse this FairQueuePolicy: " + e.Errs.ToAggregate().Error()
}

// Unwrap returns the field errors.
func (e *SchemaError) Unwrap() []error {
	out := make([]error, len(e.Errs))
	for i, fe := range e.Errs {
		out[i] = fe
	}
	return out
}
