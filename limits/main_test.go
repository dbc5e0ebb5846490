package limits

import (
	"os"
	"testing"

	"github.com/switchyard-gw/switchyard/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared() // the Cluster and Sentinel set-up the tests shared
	os.Exit(code)
}
