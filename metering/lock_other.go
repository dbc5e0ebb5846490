//go:build !unix

package metering

import (
	"io"
	"os"
	"path/filepath"
)

// lockDir only marks the journal directory on systems without flock.
func lockDir(dir string) (io.Closer, error) {
	return os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
}
