package access

import (
	"context"
	"time"

	"github.com/switchyard-gw/switchyard/auth"
)

// KeyKeeper is what the departure sweep needs of the key manager (*auth.Manager).
type KeyKeeper interface {
	List(ctx context.Context) ([]*auth.Key, error)
	ListProjects(ctx context.Context) ([]*auth.Project, error)
	Revoke(ctx context.Context, id string) (*auth.Key, error)
}

// SweepDeparted revokes the keys of people who no longer sign in, where their project
// says so: a project whose member rules say departed "revoke" has a disabled person's
// active keys in it revoked once RevokeAfter has passed since they were disabled. A
// project that says "keep" (or nothing) keeps them. Each revocation is audited with the
// reason as its actor. It returns how many keys it revoked; every gateway may run it,
// as revoking a revoked key changes nothing.
func SweepDeparted(ctx context.Context, people Store, keys KeyKeeper, now time.Time) (int, error) {
	users, err := people.ListUsers(ctx)
	if err != nil {
		return 0, err
	}
	departed := map[string]*User{}
	for _, u := range users {
		if !u.DisabledAt.IsZero() {
			departed[u.ID] = u
		}
	}
	if len(departed) == 0 {
		return 0, nil
	}
	projects, err := keys.ListProjects(ctx)
	if err != nil {
		return 0, err
	}
	after := map[string]time.Duration{} // project -> how long after departure its keys go
	for _, p := range projects {
		if p.Members != nil && p.Members.Departed == "revoke" {
			after[p.ID] = time.Duration(p.Members.RevokeAfter)
		}
	}
	all, err := keys.List(ctx)
	if err != nil {
		return 0, err
	}
	revoked := 0
	for _, k := range all {
		u, gone := departed[k.Owner]
		wait, revokes := after[k.ProjectID]
		if !gone || !revokes || !k.Active(now) || now.Before(u.DisabledAt.Add(wait)) {
			continue
		}
		who := u.Email
		if who == "" {
			who = u.ID
		}
		actorCtx := auth.WithActor(ctx, "departure of "+who)
		if _, err := keys.Revoke(actorCtx, k.ID); err != nil {
			return revoked, err
		}
		revoked++
	}
	return revoked, nil
}
