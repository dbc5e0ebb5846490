package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/limits"
)

// refuseWrites makes the database refuse every insert and update of table, as a full
// disk, a lost permission or a failing constraint would, until the returned func runs.
func (f *fixture) refuseWrites(t *testing.T, table string) (allow func()) {
	t.Helper()
	switch f.driver {
	case DriverSQLite:
		for _, op := range []string{"INSERT", "UPDATE"} {
			f.exec(t, `CREATE TRIGGER refuse_`+op+`_`+table+` BEFORE `+op+` ON `+table+
				` BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`)
		}
		return func() {
			f.exec(t, `DROP TRIGGER refuse_INSERT_`+table)
			f.exec(t, `DROP TRIGGER refuse_UPDATE_`+table)
		}
	default:
		f.exec(t, `CREATE OR REPLACE FUNCTION refuse_write() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`)
		f.exec(t, `CREATE TRIGGER refuse_`+table+` BEFORE INSERT OR UPDATE ON `+table+` FOR EACH ROW EXECUTE FUNCTION refuse_write()`)
		return func() { f.exec(t, `DROP TRIGGER refuse_`+table+` ON `+table) }
	}
}

// Every operator's change and its audit entry commit together or not at all, as the
// Manager makes them for the console and the admin API: when the audit trail refuses
// the entry, the change is rolled back (no key made, rotated, revoked, moved or
// re-limited, no project made or changed); when the change fails, no entry is left.
func TestAChangeAndItsAuditEntryCommitTogether(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := auth.WithActor(context.Background(), "alice")
		s := f.open(t)
		c, err := auth.NewCache(ctx, s)
		require.NoError(t, err)
		m := &auth.Manager{Store: s, Projects: s, Cache: c}
		_, err = m.CreateProject(ctx, auth.ProjectRequest{ID: "platform"})
		require.NoError(t, err)

		changes := []struct {
			name  string
			table string // where the change itself is written
			do    func(keyID string) error
		}{
			{"key create", "api_keys", func(string) error {
				_, err := m.Create(ctx, auth.CreateRequest{Name: "new", ProjectID: "platform", Limits: &limits.Policy{RPM: 5}})
				return err
			}},
			{"key rotate", "api_keys", func(id string) error { _, err := m.Rotate(ctx, id, time.Hour); return err }},
			{"key revoke", "api_keys", func(id string) error { _, err := m.Revoke(ctx, id); return err }},
			{"key limits", "api_keys", func(id string) error {
				_, err := m.SetKeyLimits(ctx, id, &limits.Policy{Budget: monthly(5)})
				return err
			}},
			{"key project", "api_keys", func(id string) error { _, err := m.SetKeyProject(ctx, id, "platform"); return err }},
			{"project create", "projects", func(string) error {
				_, err := m.CreateProject(ctx, auth.ProjectRequest{ID: "ci", Limits: &limits.Policy{Concurrency: 2}})
				return err
			}},
			{"project limits", "projects", func(string) error {
				_, err := m.SetProjectLimits(ctx, "platform", &limits.Policy{Budget: monthly(7)})
				return err
			}},
		}
		// What a change or its entry could leave behind.
		state := func() [][][]any {
			return [][][]any{
				f.rows(t, `SELECT * FROM api_keys ORDER BY id`),
				f.rows(t, `SELECT * FROM projects ORDER BY id`),
				f.rows(t, `SELECT * FROM audit_log ORDER BY id`),
			}
		}
		for _, ch := range changes {
			t.Run(ch.name, func(t *testing.T) {
				created, err := m.Create(ctx, auth.CreateRequest{Name: "target"})
				require.NoError(t, err)
				id := created.Key.ID
				before := state()

				allow := f.refuseWrites(t, "audit_log")
				assert.Error(t, ch.do(id), "the audit trail refused the entry")
				allow()
				assert.Equal(t, before, state(), "without its entry, the change was rolled back")

				allow = f.refuseWrites(t, ch.table)
				assert.Error(t, ch.do(id), "the change itself was refused")
				allow()
				assert.Equal(t, before, state(), "a change that failed left no entry")

				require.NoError(t, ch.do(id), "the same change, allowed")
				assert.Len(t, trail(t, s), len(before[2])+1, "and recorded once")
			})
		}
	})
}
