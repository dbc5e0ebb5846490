package signin

import (
	"encoding/json"
	"errors"
	"slices"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/switchyard-gw/switchyard/access"
)

// Bounds on an ID token's claims: it is the provider's word, but no person has a
// million groups or a name of a megabyte.
const (
	maxGroups     = 1000
	maxGroupLen   = 256
	maxEmailLen   = 320
	maxNameLen    = 200
	maxSubjectLen = 255 // OpenID Connect's own bound
)

// identity is what the sign-in keeps of an ID token.
type identity struct {
	email, name string
	groups      []string
}

// readClaims reads the person from a verified ID token: the subject (required), e-mail,
// name, and the groups claim, bounded.
func readClaims(idt *oidc.IDToken, clientID, groupsClaim string) (identity, error) {
	var id identity
	if idt.Subject == "" || len(idt.Subject) > maxSubjectLen || !printable(idt.Subject) {
		return id, errors.New("the ID token has no usable subject")
	}
	var std struct {
		Email             string `json:"email"`
		Name              string `json:"name"`
		PreferredUsername string `json:"preferred_username"`
		AuthorizedParty   string `json:"azp"`
	}
	if err := idt.Claims(&std); err != nil {
		return id, errors.New("the ID token's claims do not read")
	}
	// A token for several audiences must say it was given to us (OpenID Connect Core
	// 3.1.3.7); go-oidc checks only that we are among them.
	if len(idt.Audience) > 1 && std.AuthorizedParty != clientID {
		return id, errors.New("the ID token names several audiences and another authorized party")
	}
	id.email = boundText(std.Email, maxEmailLen)
	id.name = boundText(std.Name, maxNameLen)
	if id.name == "" {
		id.name = boundText(std.PreferredUsername, maxNameLen)
	}
	var all map[string]json.RawMessage
	if err := idt.Claims(&all); err != nil {
		return id, errors.New("the ID token's claims do not read")
	}
	id.groups = readGroups(all[groupsClaim])
	return id, nil
}

// readGroups reads a groups claim as providers write it: a list of names (most), one
// name, or an object whose keys are the names (Zitadel's roles claim). Names too long
// or not text are skipped; at most maxGroups are read.
func readGroups(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var out []string
	add := func(g string) bool {
		if len(out) >= maxGroups {
			return false
		}
		if g != "" && len(g) <= maxGroupLen && printable(g) {
			out = append(out, g)
		}
		return true
	}
	var list []json.RawMessage
	var one string
	var obj map[string]json.RawMessage
	switch {
	case json.Unmarshal(raw, &list) == nil:
		for _, item := range list {
			var g string
			if json.Unmarshal(item, &g) == nil && !add(g) {
				break
			}
		}
	case json.Unmarshal(raw, &one) == nil:
		add(one)
	case json.Unmarshal(raw, &obj) == nil:
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !add(k) {
				break
			}
		}
	}
	return out
}

// mappedGroups keeps of groups only those the mapping names, as the user record keeps
// them.
func mappedGroups(m access.Mapping, groups []string) []string {
	var out []string
	for _, g := range groups {
		if !slices.Contains(out, g) && slices.ContainsFunc(m, func(r access.Rule) bool { return r.Group == g }) {
			out = append(out, g)
		}
	}
	return out
}

// boundText keeps printable text up to max bytes, else nothing.
func boundText(s string, max int) string {
	if len(s) > max || !printable(s) {
		return ""
	}
	return s
}
