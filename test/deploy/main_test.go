package deploy

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/fairqueue/fairqueue/internal/testbin"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testbin.Main(m))
}
