package access_test

import (
	"os"
	"strings"
	"testing"

	"github.com/switchyard-gw/switchyard/access"
)

// actionWords say what each action covers, for the docs' table. A new action without
// words here fails the test, so the table never shows an action nobody explained.
var actionWords = map[access.Action]string{
	access.ActSelf:           "see who one is, sign out",
	access.ActModelsRead:     "the models, their candidates and live health, latency",
	access.ActConnectRead:    "a client's set-up (Codex, Claude Code, SDKs)",
	access.ActKeysRead:       "list and show keys",
	access.ActKeysWrite:      "create, rotate and revoke keys",
	access.ActKeysGovern:     "a key's limits and its project",
	access.ActProjectsRead:   "list and show projects",
	access.ActProjectsCreate: "create a project",
	access.ActProjectsGovern: "a project's limits and its rules for members' keys",
	access.ActUsageRead:      "usage and spend",
	access.ActRequestsRead:   "the request log",
	access.ActAuditRead:      "the audit trail",
	access.ActHealthReset:    "clear a candidate's health",
	access.ActAlertsRead:     "the alert webhooks and their deliveries",
	access.ActTokensRead:     "list API tokens",
	access.ActTokensWrite:    "create and revoke API tokens",
	access.ActPeopleRead:     "the people who signed in, their sessions",
	access.ActPeopleWrite:    "disable or enable a person, end a session",
	access.ActSettingsRead:   "the sign-in settings and the role mapping",
}

const (
	tableStart = "<!-- role table: generated from access/decide.go; `go test ./access -run TestDocsRoleTable` checks it -->\n"
	tableEnd   = "<!-- end of role table -->"
	docsPage   = "../docs/people-and-access.md"
)

// roleTable renders the matrix of access/decide.go as the docs show it.
func roleTable(t *testing.T) string {
	var b strings.Builder
	b.WriteString("| Action | What it covers |")
	for _, r := range access.Roles {
		b.WriteString(" " + string(r) + " |")
	}
	b.WriteString("\n|---|---|")
	for range access.Roles {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, a := range access.Actions {
		words, ok := actionWords[a]
		if !ok {
			t.Errorf("action %s has no words for the docs' table: add them to actionWords", a)
		}
		b.WriteString("| `" + string(a) + "` | " + words + " |")
		for _, r := range access.Roles {
			cell := access.Allowed(r, a)
			if cell == "" {
				cell = "—"
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// The docs' table of what each role may do is the decision matrix itself: when the
// matrix changes and the page does not, this fails and prints the table to paste.
func TestDocsRoleTable(t *testing.T) {
	want := roleTable(t)
	page, err := os.ReadFile(docsPage)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, found := strings.Cut(string(page), tableStart)
	got, _, ended := strings.Cut(rest, tableEnd)
	if !found || !ended {
		t.Fatalf("%s holds no role table between %q and %q; put this there:\n\n%s%s%s", docsPage,
			strings.TrimSpace(tableStart), tableEnd, tableStart, want, tableEnd)
	}
	if got != want {
		t.Errorf("the role table in %s differs from access/decide.go's matrix; replace it with:\n\n%s%s%s",
			docsPage, tableStart, want, tableEnd)
	}
}
