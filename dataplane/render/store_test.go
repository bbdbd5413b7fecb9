package render

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
)

func TestRenderStore(t *testing.T) {
	cases := []struct {
		name  string
		store fqv1alpha1.Store
		want  *config.Store
	}{
		{name: "empty is memory and renders nothing", store: fqv1alpha1.Store{}},
		{name: "explicit memory renders nothing", store: fqv1alpha1.Store{Type: fqv1alpha1.StoreTypeMemory}},
		{
			name: "redis without API defaults gets them",
			store: fqv1alpha1.Store{Type: fqv1alpha1.StoreTypeRedis, Redis: &fqv1alpha1.RedisStore{
				Addresses: []string{"redis:6379"}, SecretRef: &fqv1alpha1.LocalSecretReference{Name: "redis-auth"},
			}},
			want: &config.Store{Type: config.StoreRedis, Redis: &config.RedisStore{
				Addresses: []string{"redis:6379"}, Mode: config.RedisStandalone,
				Secret:  &config.SecretRef{Namespace: "ns", Name: "redis-auth"},
				Timeout: config.Duration{Duration: 250 * time.Millisecond}, FailureMode: config.FailClosed,
			}},
		},
		{
			name: "sentinel over TLS failing open",
			store: fqv1alpha1.Store{Type: fqv1alpha1.StoreTypeRedis, Redis: &fqv1alpha1.RedisStore{
				Addresses: []string{"s1:26379", "s2:26379"}, Mode: fqv1alpha1.RedisModeSentinel, SentinelMasterName: "mymaster",
				DB: 3, TLS: true, Timeout: fqv1alpha1.Duration("20ms"), FailureMode: fqv1alpha1.StoreFailOpen,
			}},
			want: &config.Store{Type: config.StoreRedis, Redis: &config.RedisStore{
				Addresses: []string{"s1:26379", "s2:26379"}, Mode: config.RedisSentinel, SentinelMasterName: "mymaster",
				DB: 3, TLS: true, Timeout: config.Duration{Duration: 20 * time.Millisecond}, FailureMode: config.FailOpen,
			}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := unitPolicy()
			p.Spec.Store = tc.store
			r, err := Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "llm-hash-key", Secrets: unitSecrets()})
			if err != nil {
				t.Fatal(err)
			}
			c, err := config.Parse(r.Data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Store, tc.want) {
				t.Fatalf("rendered store %+v, want %+v", c.Store, tc.want)
			}
		})
	}
}

func TestRenderStoreNeverHoldsSecretValues(t *testing.T) {
	p := unitPolicy()
	p.Spec.Store = fqv1alpha1.Store{Type: fqv1alpha1.StoreTypeRedis, Redis: &fqv1alpha1.RedisStore{
		Addresses: []string{"redis:6379"}, SecretRef: &fqv1alpha1.LocalSecretReference{Name: "redis-auth"},
	}}
	secrets := unitSecrets()
	secrets["redis-auth"] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "redis-auth"},
		Data: map[string][]byte{"username": []byte("fq-user-xyz"), "password": []byte("hunter2-redis-pass")}}
	r, err := Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "llm-hash-key", Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"fq-user-xyz", "hunter2-redis-pass"} {
		if bytes.Contains(r.Data, []byte(v)) {
			t.Fatalf("the rendered config holds a Redis Secret value:\n%s", r.Data)
		}
	}
}
