package caddymodule

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
)

// The console API's answers about API tokens, people and sessions, as the CLI reads
// them.
type (
	tokenAnswer struct {
		Token  access.Token `json:"token"`
		Secret string       `json:"secret,omitempty"`
	}
	tokensAnswer struct {
		Tokens []access.Token `json:"tokens"`
	}
	personAnswer struct {
		Person access.User `json:"person"`
	}
	peopleAnswer struct {
		People []access.User `json:"people"`
	}
	sessionAnswer struct {
		Session access.Session `json:"session"`
	}
	sessionsAnswer struct {
		Sessions []access.Session `json:"sessions"`
	}
)

// tokensCommand is `caddy switchyard tokens …`.
func (c *cli) tokensCommand() *cobra.Command {
	tokens := &cobra.Command{Use: "tokens", Short: "Create, list and revoke API tokens (automation's way into the console's API)"}
	var name, role, projects, expiresIn string
	create := &cobra.Command{
		Use:   "create --name <name> --role <role> [--projects a,b] [--expires-in 30d]",
		Short: "Creates an API token and prints its secret once; it never reaches further than whoever makes it",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			grant := access.Grant{Role: access.Role(role), Projects: splitList(projects)}
			// The gateway refuses such a grant too; saying so here needs no round trip.
			if err := grant.Validate(); err != nil {
				return err
			}
			if strings.TrimSpace(name) == "" {
				return errors.New("--name: required")
			}
			body := map[string]any{"name": name, "role": role, "projects": grant.Projects}
			if grant.Projects == nil {
				body["projects"] = []string{}
			}
			if expiresIn != "" {
				body["expires_in"] = expiresIn
			}
			return call(c, "POST", routePath("tokens"), body, c.printTokenSecret)
		},
	}
	create.Flags().StringVar(&name, "name", "", "what the token is for, e.g. ci (required)")
	create.Flags().StringVar(&role, "role", "", "owner, admin, project_admin, member or viewer (required)")
	create.Flags().StringVar(&projects, "projects", "", "comma-separated projects the role is for (project_admin and member need them)")
	create.Flags().StringVar(&expiresIn, "expires-in", "", "lifetime, for example 30d (default: the gateway's)")
	_ = create.MarkFlagRequired("name")
	_ = create.MarkFlagRequired("role")
	list := &cobra.Command{
		Use: "list", Short: "Lists the API tokens (never their secrets)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return call(c, "GET", routePath("tokens"), nil, c.printTokens) },
	}
	revoke := postToID(c, "tokens", "revoke", "Stops an API token at once", c.printToken)
	tokens.AddCommand(create, list, revoke)
	return tokens
}

// peopleCommand is `caddy switchyard people …`.
func (c *cli) peopleCommand() *cobra.Command {
	people := &cobra.Command{Use: "people", Short: "List the people who signed in; disable or enable one"}
	list := &cobra.Command{
		Use: "list", Short: "Lists the people who have signed in, with the roles their groups gave", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return call(c, "GET", routePath("people"), nil, c.printPeople) },
	}
	disable := postToID(c, "people", "disable", "Stops a person signing in and ends their sessions", c.printPerson)
	enable := postToID(c, "people", "enable", "Lets a disabled person sign in again", c.printPerson)
	people.AddCommand(list, disable, enable)
	return people
}

// sessionsCommand is `caddy switchyard sessions …`.
func (c *cli) sessionsCommand() *cobra.Command {
	sessions := &cobra.Command{Use: "sessions", Short: "List the console's live sessions; end one"}
	list := &cobra.Command{
		Use: "list", Short: "Lists the live sessions, newest first", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return call(c, "GET", routePath("sessions"), nil, c.printSessions)
		},
	}
	revoke := postToID(c, "sessions", "revoke", "Ends a session at once (its browser must sign in again)", c.printSession)
	sessions.AddCommand(list, revoke)
	return sessions
}

// postToID is the command `<verb> <id>` that POSTs to <group>/<id>/<verb> and shows the
// answer.
func postToID[T any](c *cli, group, verb, short string, show func(*T) error) *cobra.Command {
	return &cobra.Command{
		Use: verb + " <id>", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return call(c, "POST", routePath(group, args[0], verb), nil, show)
		},
	}
}

func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// grantsText shows grants as "owner" or "project_admin(team-a,team-b)", escaped.
func grantsText(grants []access.Grant) string {
	if len(grants) == 0 {
		return "-"
	}
	parts := make([]string, len(grants))
	for i, g := range grants {
		parts[i] = auth.PrintableName(string(g.Role))
		if len(g.Projects) > 0 {
			projects := make([]string, len(g.Projects))
			for j, p := range g.Projects {
				projects[j] = auth.PrintableName(p)
			}
			parts[i] += "(" + strings.Join(projects, ",") + ")"
		}
	}
	return strings.Join(parts, ", ")
}

func tokenStatus(t *access.Token, now time.Time) string {
	switch {
	case !t.RevokedAt.IsZero():
		return "revoked"
	case !t.Active(now):
		return "expired"
	}
	return "active"
}

func (c *cli) printTokens(answer *tokensAnswer) error {
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tSTATUS\tROLE\tMADE BY\tCREATED\tLAST USED\tEXPIRES")
	now := time.Now()
	for i := range answer.Tokens {
		t := &answer.Tokens[i]
		fmt.Fprintf(tw, "%s\t%s\t%s…\t%s\t%s\t%s\t%s\t%s\t%s\n", auth.PrintableName(t.ID), auth.PrintableName(t.Name),
			auth.PrintableName(t.Prefix), tokenStatus(t, now), grantsText([]access.Grant{t.Grant}), orDash(auth.PrintableName(t.CreatedBy)),
			when(t.CreatedAt), when(t.LastUsed), when(t.ExpiresAt))
	}
	return tw.Flush()
}

func (c *cli) printToken(answer *tokenAnswer) error {
	t := &answer.Token
	fmt.Fprintf(c.out, "id:         %s\nname:       %s\nprefix:     %s…\nstatus:     %s\nrole:       %s\nmade by:    %s\ncreated:    %s\nlast used:  %s\nexpires:    %s\n",
		auth.PrintableName(t.ID), auth.PrintableName(t.Name), auth.PrintableName(t.Prefix), tokenStatus(t, time.Now()),
		grantsText([]access.Grant{t.Grant}), orDash(auth.PrintableName(t.CreatedBy)), when(t.CreatedAt), when(t.LastUsed), when(t.ExpiresAt))
	return nil
}

func (c *cli) printTokenSecret(answer *tokenAnswer) error {
	if !strings.HasPrefix(answer.Secret, access.TokenPrefix) {
		return errors.New("the gateway's answer holds no token secret")
	}
	if err := c.printToken(answer); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "\nsecret (shown this once, store it now): %s\nuse it with: export %s=<secret> %s=<the console's https address>\n",
		answer.Secret, tokenEnv, consoleEnv)
	return nil
}

func personStatus(u *access.User) string {
	if !u.DisabledAt.IsZero() {
		return "disabled"
	}
	return "active"
}

func (c *cli) printPeople(answer *peopleAnswer) error {
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tEMAIL\tNAME\tSTATUS\tROLES\tLAST SIGN-IN")
	for i := range answer.People {
		u := &answer.People[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", auth.PrintableName(u.ID), orDash(auth.PrintableName(u.Email)),
			orDash(auth.PrintableName(u.Name)), personStatus(u), grantsText(u.Grants), when(u.LastSignIn))
	}
	return tw.Flush()
}

func (c *cli) printPerson(answer *personAnswer) error {
	u := &answer.Person
	fmt.Fprintf(c.out, "id:         %s\nemail:      %s\nname:       %s\nstatus:     %s\nroles:      %s\nlast sign-in: %s\n",
		auth.PrintableName(u.ID), orDash(auth.PrintableName(u.Email)), orDash(auth.PrintableName(u.Name)), personStatus(u),
		grantsText(u.Grants), when(u.LastSignIn))
	if !u.DisabledAt.IsZero() {
		fmt.Fprintf(c.out, "disabled:   %s %s\n", when(u.DisabledAt), auth.PrintableName(u.DisabledWhy))
	}
	return nil
}

// sessionWho names whose session it is: the person's id, or the break-glass user.
func sessionWho(s *access.Session) string {
	if s.UserID != "" {
		return auth.PrintableName(s.UserID)
	}
	return orDash(auth.PrintableName(s.Name))
}

func (c *cli) printSessions(answer *sessionsAnswer) error {
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tWHO\tROLES\tFROM\tSTARTED\tLAST SEEN\tENDS")
	for i := range answer.Sessions {
		s := &answer.Sessions[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", auth.PrintableName(s.ID), auth.PrintableName(string(s.Kind)), sessionWho(s),
			grantsText(s.Grants), orDash(auth.PrintableName(s.Addr)), when(s.CreatedAt), when(s.LastSeenAt), when(s.ExpiresAt))
	}
	return tw.Flush()
}

func (c *cli) printSession(answer *sessionAnswer) error {
	s := &answer.Session
	status := "live"
	if !s.RevokedAt.IsZero() {
		status = "ended " + when(s.RevokedAt)
	}
	_, err := fmt.Fprintf(c.out, "id:         %s\nkind:       %s\nwho:        %s\nstatus:     %s\n",
		auth.PrintableName(s.ID), auth.PrintableName(string(s.Kind)), sessionWho(s), status)
	return err
}
