package reload

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

func configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}, Data: data}
}

func TestConfigMapSourceFollowsItsConfigMap(t *testing.T) {
	v1, v2 := render(t, 1, 1), render(t, 2, 2)
	client := fake.NewClientset(configMap("llm-dataplane", map[string]string{config.ConfigMapKey: string(v1)}))
	cms := client.CoreV1().ConfigMaps("team-a")
	src := NewConfigMapSource(client, "team-a", "llm-dataplane", testLogger(t))
	if got, want := src.String(), "ConfigMap team-a/llm-dataplane"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	sink := runSource(t, src)
	ctx := t.Context()

	waitNotified(t, sink, "the initial list")
	assertLast(t, sink, "the initial list", v1)

	// Another ConfigMap in the namespace is ignored, whatever it holds.
	if _, err := cms.Create(ctx, configMap("other", map[string]string{config.ConfigMapKey: string(v2)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// An update is delivered.
	if _, err := cms.Update(ctx, configMap("llm-dataplane", map[string]string{config.ConfigMapKey: string(v2)}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNotified(t, sink, "the update")
	assertLast(t, sink, "the update", v2)
	if u, _ := sink.snapshot(); len(u) != 2 {
		t.Errorf("delivered %d updates, want 2: the other ConfigMap leaked in", len(u))
	}

	// A ConfigMap without the key is rejected, not delivered as empty bytes.
	if _, err := cms.Update(ctx, configMap("llm-dataplane", map[string]string{"wrong": "x"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNotified(t, sink, "the rejection")
	if _, r := sink.snapshot(); len(r) != 1 || !strings.Contains(r[0].Error(), `no "config.json" key`) {
		t.Errorf("rejections = %v, want one naming the missing key", r)
	}

	// Deleting it delivers nothing; recreating it delivers the new content.
	if err := cms.Delete(ctx, "llm-dataplane", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, configMap("llm-dataplane", map[string]string{config.ConfigMapKey: string(v1)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNotified(t, sink, "the recreated ConfigMap")
	assertLast(t, sink, "the recreated ConfigMap", v1)
	if u, r := sink.snapshot(); len(u) != 3 || len(r) != 1 {
		t.Errorf("got %d updates and %d rejections, want 3 and 1: the delete was delivered", len(u), len(r))
	}
}

func assertLast(t *testing.T, sink *recordingSink, what string, want []byte) {
	t.Helper()
	u, _ := sink.snapshot()
	if len(u) == 0 || !bytes.Equal(u[len(u)-1], want) {
		t.Fatalf("after %s the last update is not the expected config (%d updates)", what, len(u))
	}
}
