package caddymodule

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `usage --group owner --owner …` asks for one owner's usage by owner and shows each
// row's owner, a dash for keys without one.
func TestCLIUsageByOwner(t *testing.T) {
	f := newFakeAdmin(t, map[string]string{"GET /switchyard/usage": `{"from":"2026-11-01","to":"2026-11-30","group":["owner","model"],` +
		`"rows":[{"model":"m1","requests":3,"cost_micros":1500000},{"owner":"usr_ann","model":"m1","requests":2,"cost_micros":250000}],` +
		`"total":{"requests":5,"cost_micros":1750000}}`})
	out, err := f.run(t, "usage", "--group", "owner,model", "--owner", "usr_ann")
	require.NoError(t, err)
	assert.Equal(t, []string{"GET /switchyard/usage?group=owner%2Cmodel&owner=usr_ann"}, f.sent())
	assert.Regexp(t, `OWNER\s+MODEL\s+REQUESTS`, out)
	assert.Regexp(t, `\n\s*-\s+m1\s+3\s`, out, "a key without an owner")
	assert.Regexp(t, `usr_ann\s+m1\s+2\s`, out)
	assert.Regexp(t, `TOTAL\s+5\s`, out)
}
