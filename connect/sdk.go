package connect

import (
	"fmt"
	"strings"
)

// sdk is an official SDK's set-up: the two variables every SDK of the family reads, with
// the base address of the family (Family A clients append the operation to {base}/v1,
// Family B clients to {base}), and the models it may call with their limits, for the
// max_tokens a program sends.
func sdk(r Request, family string) (*Setup, error) {
	client, base, prefix, what := OpenAI, r.BaseURL+"/v1", "OPENAI", "chat completions and responses"
	if family == familyB {
		client, base, prefix, what = Anthropic, r.BaseURL, "ANTHROPIC", "messages"
	}
	models, _, err := pick(Request{Models: r.Models}, family, titles[client])
	if err != nil {
		return nil, err
	}
	s := &Setup{Client: client, Title: titles[client], Models: ids(models)}
	s.Env = []Var{{prefix + "_BASE_URL", base}, {prefix + "_API_KEY", "$" + r.KeyEnv}}

	var t strings.Builder
	fmt.Fprintf(&t, "# %s for the Switchyard gateway at %s.\n", s.Title, r.BaseURL)
	fmt.Fprintf(&t, "# Models this key may call on %s (%s):\n", family, what)
	t.WriteString(modelList(models))
	t.WriteString(exports(s.Env, nil))
	s.Text = t.String()
	return s, nil
}
