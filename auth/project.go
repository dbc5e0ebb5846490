package auth

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/limits"
)

// Project groups keys (a team, a product, a CI system). A project may carry limits,
// which every request of its keys must fit as well as the key's own.
type Project struct {
	// ID is the operator's slug ("platform", "ci"); see ValidateProjectID.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Limits is nil when the project limits nothing.
	Limits *limits.Policy `json:"limits,omitempty"`
	// Members are the project's rules for its members' keys; nil: members may not
	// make keys here until an admin sets rules.
	Members   *MemberRules `json:"members,omitempty"`
	CreatedAt time.Time    `json:"created_at"`
	// Seq orders changes, from the same sequence as keys' (see Key.Seq).
	Seq int64 `json:"-"`
}

// MemberRules are what a project lets its members do with keys of their own: which
// models their keys may use, how long a key may live, each key's own limits, and one
// budget and rate for all of one member's keys together.
type MemberRules struct {
	// Models are the models a member's key may use; empty: every model.
	Models []string `json:"models,omitempty"`
	// MaxExpiry bounds a member key's lifetime ("720h"); zero: members' keys need no
	// expiry.
	MaxExpiry Duration `json:"max_expiry,omitzero"`
	// KeyLimits are every member key's own limits (the project's default for them).
	KeyLimits *limits.Policy `json:"key_limits,omitempty"`
	// Limits hold all of one member's keys in the project together.
	Limits *limits.Policy `json:"limits,omitempty"`
	// Departed says what becomes of a person's keys here once they are disabled (their
	// provider account no longer signs in): "keep", or "revoke" after RevokeAfter.
	Departed    string   `json:"departed,omitempty"`
	RevokeAfter Duration `json:"revoke_after,omitzero"`
}

// Duration is a time.Duration written in JSON as Go writes durations ("720h0m0s") and
// read from that or from a number of seconds.
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}

// UnmarshalJSON reads "30m", "720h" or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if s, err := strconv.Unquote(string(b)); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil || v < 0 {
			return fmt.Errorf("duration %s: want for example \"720h\"", strconv.QuoteToGraphic(truncate(s, 40)))
		}
		*d = Duration(v)
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 0 || n > int64(100*365*24*3600) {
		return errors.New("duration: want a string such as \"720h\" or whole seconds")
	}
	*d = Duration(time.Duration(n) * time.Second)
	return nil
}

// projectIDPattern is what a project id may be: lower-case letters, digits, '.', '_'
// and '-', starting with a letter or digit, at most 64 characters. It goes in URLs,
// counter names and command lines as it is.
var projectIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// ValidateProjectID checks a project id; the error says what a valid one looks like.
func ValidateProjectID(id string) error {
	if !projectIDPattern.MatchString(id) {
		return fmt.Errorf("project id %s: want 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit (e.g. platform)",
			strconv.QuoteToGraphic(truncate(id, 80)))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// The actions the audit trail records.
const (
	ActionKeyCreate     = "key.create"
	ActionKeyRotate     = "key.rotate"
	ActionKeyRevoke     = "key.revoke"
	ActionKeyLimits     = "key.limits"
	ActionKeyProject    = "key.project"
	ActionProjectCreate = "project.create"
	ActionProjectLimits = "project.limits"
	// ActionCandidateReset is an operator clearing a candidate's live health; its target
	// is "<model>/<candidate>".
	ActionCandidateReset = "candidate.reset"
	// ActionProjectMembers is a change to a project's rules for members' keys.
	ActionProjectMembers = "project.members"
	// People and access (package access): sign-in and sign-out, a person disabled or
	// enabled again, a session ended, an API token made or revoked.
	ActionSignIn      = "session.sign_in"
	ActionSignOut     = "session.sign_out"
	ActionSessionEnd  = "session.revoke"
	ActionUserDisable = "user.disable"
	ActionUserEnable  = "user.enable"
	ActionTokenCreate = "token.create"
	ActionTokenRevoke = "token.revoke"
)

// AuditEntry is one change to a key, a project or their limits, or an operator's reset of
// a candidate's health: who made it (the
// console's basic-auth user, or "admin API"), what it was, to what, and when. Detail
// says in words what changed; it never holds a secret.
type AuditEntry struct {
	// ID is given by the store; a larger id is a later entry.
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	// Target is the key id or project id changed, or "<model>/<candidate>" for a
	// candidate's health.
	Target string `json:"target"`
	Detail string `json:"detail,omitempty"`
}

// ProjectStore keeps projects, the keys' projects and limits, and the audit trail.
// *store.Store implements it. Every method that changes something takes the audit
// entry that records the change (nil: none) and commits both in one transaction,
// giving the entry its ID (and At, when zero). Every change to a key or a project gives
// it a new Seq, so that every gateway's cache picks it up.
type ProjectStore interface {
	// CreateProject stores a new project (ErrConflict when the id is taken). On
	// success p.Seq is set, and p.CreatedAt when it was zero.
	CreateProject(ctx context.Context, p *Project, e *AuditEntry) error
	// GetProject returns one project, or an error that errors.Is ErrNotFound.
	GetProject(ctx context.Context, id string) (*Project, error)
	// ListProjects returns every project, by id.
	ListProjects(ctx context.Context) ([]*Project, error)
	// SetProjectLimits replaces a project's limits (nil clears them).
	SetProjectLimits(ctx context.Context, id string, p *limits.Policy, e *AuditEntry) error
	// SetProjectMembers replaces a project's rules for its members' keys (nil: members
	// may not make keys there).
	SetProjectMembers(ctx context.Context, id string, rules *MemberRules, e *AuditEntry) error
	// ProjectsChangedSince returns the projects whose Seq is greater than seq, in Seq
	// order.
	ProjectsChangedSince(ctx context.Context, seq int64) ([]*Project, error)
	// SetKeyLimits replaces a key's own limits (nil clears them).
	SetKeyLimits(ctx context.Context, keyID string, p *limits.Policy, e *AuditEntry) error
	// SetKeyProject puts a key in a project ("" takes it out of any). An unknown key
	// or project gives an error that errors.Is ErrNotFound and names which.
	SetKeyProject(ctx context.Context, keyID, projectID string, e *AuditEntry) error
	// AppendAudit records an entry on its own.
	AppendAudit(ctx context.Context, e *AuditEntry) error
	// ListAudit returns at most limit entries, newest first, with ids below beforeID
	// (0: from the latest).
	ListAudit(ctx context.Context, limit int, beforeID int64) ([]*AuditEntry, error)
}

// AuditedKeyStore is a KeyStore that records a key's creation, rotation and revocation
// together with their audit entries, in one transaction. *store.Store implements it.
type AuditedKeyStore interface {
	// CreateKeyAudited is KeyStore.CreateKey and e.
	CreateKeyAudited(ctx context.Context, k *Key, e *AuditEntry) error
	// RotateKeyAudited is KeyStore.RotateKey and e.
	RotateKeyAudited(ctx context.Context, oldID string, replacement *Key, at time.Time, grace time.Duration, e *AuditEntry) (*Key, error)
	// RevokeKeyAudited is KeyStore.RevokeKey and e; a key already revoked changes
	// nothing and records nothing (changed is false).
	RevokeKeyAudited(ctx context.Context, id string, at time.Time, e *AuditEntry) (changed bool, err error)
}

// NotFoundError is an id the store does not have, named with what it was looked up
// as ("key", "project"). It errors.Is ErrNotFound.
type NotFoundError struct {
	What, ID string
}

func (e *NotFoundError) Error() string {
	return "no such " + e.What + " " + strconv.QuoteToGraphic(truncate(e.ID, 80))
}

// Is makes errors.Is(err, ErrNotFound) hold.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// IsProjectNotFound reports an error that names a project the store does not have.
func IsProjectNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf) && nf.What == "project"
}

// DefaultActor is who made a change when the caller said nothing else: a call to the
// admin API.
const DefaultActor = "admin API"

// maxActorChars bounds an actor's name in the audit trail.
const maxActorChars = 100

type actorKey struct{}

// WithActor returns ctx carrying who is making changes (the console's basic-auth
// user); the Manager records it in the audit entries of changes made with ctx. Text
// that is not a printable name is recorded quoted, never as it came.
func WithActor(ctx context.Context, actor string) context.Context {
	actor = strings.TrimSpace(actor)
	if actor == "" {
		return ctx
	}
	if _, err := CheckKeyName(actor); err != nil {
		actor = PrintableName(truncate(actor, maxActorChars))
	} else if r := []rune(actor); len(r) > maxActorChars {
		actor = string(r[:maxActorChars])
	}
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorOf is the actor WithActor put in ctx, or DefaultActor.
func ActorOf(ctx context.Context) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok && a != "" {
		return a
	}
	return DefaultActor
}

// DescribeLimits says a policy in words, as the audit trail records it: "budget
// 50/month, rpm 60, tpm 100000, concurrency 4; model gpt-5: budget 10/month", or "no
// limits".
func DescribeLimits(p *limits.Policy) string {
	if p.IsZero() {
		return "no limits"
	}
	parts := []string{}
	if s := describeOne(p); s != "" {
		parts = append(parts, s)
	}
	models := make([]string, 0, len(p.Models))
	for m := range p.Models {
		models = append(models, m)
	}
	slices.Sort(models)
	for _, m := range models {
		if v := p.Models[m]; !v.IsZero() {
			parts = append(parts, "model "+m+": "+describeOne(v))
		}
	}
	return strings.Join(parts, "; ")
}

func describeOne(p *limits.Policy) string {
	var f []string
	if p.Budget != nil {
		f = append(f, "budget "+p.Budget.String())
	}
	if p.RPM > 0 {
		f = append(f, "rpm "+strconv.FormatInt(p.RPM, 10))
	}
	if p.TPM > 0 {
		f = append(f, "tpm "+strconv.FormatInt(p.TPM, 10))
	}
	if p.Concurrency > 0 {
		f = append(f, "concurrency "+strconv.FormatInt(p.Concurrency, 10))
	}
	return strings.Join(f, ", ")
}

// NormalizeLimits is the policy as stored: nil when it limits nothing.
func NormalizeLimits(p *limits.Policy) *limits.Policy {
	if p.IsZero() {
		return nil
	}
	return p
}
