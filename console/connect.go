package console

import (
	"net/http"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/connect"
)

// connectSetup answers GET /connect/{client}?base_url=…&key_env=…[&key=<id>][&model=<id>]
// with a client's set-up for this gateway (connect.Generate): for the models the key
// may call when a key id is given, else for every model. The CLI's `connect` and the
// console's "Connect a tool" view both read it, so both show the same set-up.
func (a *API) connectSetup(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var models []ModelInfo
	if a.Models != nil {
		models = a.Models()
	}
	if id := q.Get("key"); id != "" {
		if a.Keys == nil {
			writeError(w, http.StatusServiceUnavailable, "this gateway has no key store configured, so a key's models cannot be looked up; leave out the key")
			return
		}
		k, err := a.Keys.Get(r.Context(), id)
		if err != nil {
			a.fail(w, err)
			return
		}
		if !may(r.Context(), access.ActKeysRead, keyResource(k)) {
			refuse(w, "key "+k.ID)
			return
		}
		if status := k.Status(a.now()); status != "active" {
			writeError(w, http.StatusBadRequest, "the key "+id+" is "+status+": a set-up for it would not work")
			return
		}
		models = keyModels(models, k)
	}
	in := make([]connect.Model, 0, len(models))
	for _, m := range models {
		in = append(in, connect.Model{ID: m.ID, DisplayName: m.DisplayName, Protocols: m.Protocols,
			ContextWindow: m.ContextWindow, MaxOutputTokens: m.MaxOutputTokens})
	}
	setup, err := connect.Generate(connect.Request{
		Client: r.PathValue("client"), BaseURL: q.Get("base_url"), KeyEnv: q.Get("key_env"),
		Model: q.Get("model"), Models: in,
	})
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, SetupAnswer{Setup: setup})
}

// keyModels keeps the models a key may call: all of them when it names none.
func keyModels(models []ModelInfo, k *auth.Key) []ModelInfo {
	if len(k.Models) == 0 {
		return models
	}
	allowed := map[string]bool{}
	for _, id := range k.Models {
		allowed[id] = true
	}
	var out []ModelInfo
	for _, m := range models {
		if allowed[m.ID] {
			out = append(out, m)
		}
	}
	return out
}
