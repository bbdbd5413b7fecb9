package reload

import (
	"fmt"
	"testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// BenchmarkReloaderUpdate measures one reload of a config at the API's
// weights limit (1,024 tenants): hash, parse, validate and apply. The apply
// step is a no-op here, so this is the reload path's own cost.
func BenchmarkReloaderUpdate(b *testing.B) {
	base, err := config.Parse(render(b, 1, 1))
	if err != nil {
		b.Fatal(err)
	}
	versions := make([][]byte, 2)
	for v := range versions {
		c := base.DeepCopy()
		c.Policy.Generation = int64(v + 1)
		c.FairQueuing.Weights = nil
		for i := range 1024 {
			c.FairQueuing.Weights = append(c.FairQueuing.Weights, config.Weight{TenantHash: identity.Hash(testKey, fmt.Sprint("tenant-", i)), Weight: int32(1 + (i+v)%1000)})
		}
		if versions[v], err = config.Marshal(c); err != nil {
			b.Fatal(err)
		}
	}
	r, err := New(func(*config.Config, string) error { return nil }, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(versions[0])))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := r.Update("bench", versions[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}
