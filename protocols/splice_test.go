package protocols

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A member added in place of an object's closing brace leaves a valid object whatever
// precedes the brace: nothing, space, or a last member.
func TestAddMemberKeepsTheObjectValid(t *testing.T) {
	for in, want := range map[string]string{
		`{}`:               `{"n":5}`,
		"{ \n }\n":         "{ \n \"n\":5}\n",
		`{"a":1}`:          `{"a":1,"n":5}`,
		"{\"a\":[1] \t}  ": "{\"a\":[1] \t,\"n\":5}  ",
	} {
		e, ok := addMember([]byte(in), "n", []byte("5"))
		require.True(t, ok, in)
		got := spliceTwo([]byte(in), edit{0, 0, nil}, e).Bytes()
		assert.Equal(t, want, string(got), in)
		assert.True(t, ValidJSONObject(got), in)
	}
	for _, in := range []string{``, `   `, `[1]`, `{"a":1`} {
		_, ok := addMember([]byte(in), "n", []byte("5"))
		assert.False(t, ok, in)
	}
}
