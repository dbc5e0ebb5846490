//go:build unix

package metering

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive lock on the journal directory: two gateways writing one
// journal would overwrite each other's positions and delete each other's segments. The
// kernel releases the lock when the process dies, so a crash leaves nothing stale.
func lockDir(dir string) (io.Closer, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("the usage journal %s is in use by another gateway; give each gateway its own (switchyard { journal <dir> })", dir)
		}
		return nil, err
	}
	return f, nil
}
