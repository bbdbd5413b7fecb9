package docs

import (
	"fmt"
	"os"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/fairqueue/fairqueue/dataplane/reload"
)

// TestOperationsStatesTheRBACAndKeyRotation keeps operations.md true to the
// code: the verbs it names are the shipped Role's, and it describes the hash
// key as followed through its Secret (reload.HashKeyWatcher, reload.MaxHashKeys
// keys kept), not as read once at start.
func TestOperationsStatesTheRBACAndKeyRotation(t *testing.T) {
	raw, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(raw)), " ")
	roleYAML, err := os.ReadFile("../config/dataplane/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.Role
	if err := yaml.Unmarshal(roleYAML, &role); err != nil {
		t.Fatal(err)
	}
	verbs := map[string]string{}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			verbs[res] = strings.Join(r.Verbs, "/")
		}
	}
	for _, want := range []string{
		verbs["configmaps"] + " on the policy's ConfigMap",
		verbs["secrets"] + " on its hash-key Secret",
		verbs["leases"] + " on Leases",
		fmt.Sprintf("keeps the last %d keys it has seen by fingerprint", reload.MaxHashKeys),
		"a rotation needs no restart",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/operations.md does not say %q", want)
		}
	}
	for _, stale := range []string{"The hash key itself is not reloaded", "get on the hash-key Secret"} {
		if strings.Contains(doc, stale) {
			t.Errorf("docs/operations.md still says %q", stale)
		}
	}
}
