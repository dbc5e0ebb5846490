package channel

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A channel notes its token on every request: noting the current one again must not
// push the previous one out, which a request sent before the rotation may still see
// echoed in its answer.
func TestObtainedKeepsTheCurrentAndThePreviousSet(t *testing.T) {
	var o Obtained
	assert.Nil(t, o.Secrets())
	o.Note("tok-a")
	o.Note("tok-b")
	for range 3 {
		o.Note("tok-b")
	}
	assert.Equal(t, []string{"tok-b", "tok-a"}, o.Secrets())
	o.Note("tok-c", "", "ab") // values too short to mask are left out
	assert.Equal(t, []string{"tok-c", "tok-b"}, o.Secrets(), "tok-a has rotated out")
}
