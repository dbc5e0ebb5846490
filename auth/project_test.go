package auth

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/limits"
)

// projectFakeStore is fakeStore with projects: what the cache reads of a ProjectStore
// (ProjectsChangedSince); the other calls are not used here.
type projectFakeStore struct {
	*fakeStore
	projects map[string]*Project
	projDown bool // ProjectsChangedSince fails, the keys' calls do not
}

func newProjectFakeStore() *projectFakeStore {
	return &projectFakeStore{fakeStore: newFakeStore(), projects: map[string]*Project{}}
}

// putProject stores or changes a project, with the next sequence number.
func (s *projectFakeStore) putProject(p Project) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	p.Seq = s.seq
	s.projects[p.ID] = &p
}

// setKey changes a stored key's project and limits, with the next sequence number.
func (s *projectFakeStore) setKey(id, project string, p *limits.Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	k := s.keys[id]
	k.ProjectID, k.Limits, k.Seq = project, p, s.seq
}

func (s *projectFakeStore) ProjectsChangedSince(_ context.Context, seq int64) ([]*Project, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down || s.projDown {
		return nil, errDown
	}
	var out []*Project
	for _, p := range s.projects {
		if p.Seq > seq {
			c := *p
			out = append(out, &c)
		}
	}
	slices.SortFunc(out, func(a, b *Project) int { return int(a.Seq - b.Seq) })
	return out, nil
}

var errNotUsed = errors.New("not used")

func (s *projectFakeStore) CreateProject(context.Context, *Project, *AuditEntry) error {
	return errNotUsed
}
func (s *projectFakeStore) GetProject(context.Context, string) (*Project, error) {
	return nil, errNotUsed
}
func (s *projectFakeStore) ListProjects(context.Context) ([]*Project, error) { return nil, errNotUsed }
func (s *projectFakeStore) SetProjectLimits(context.Context, string, *limits.Policy, *AuditEntry) error {
	return errNotUsed
}
func (s *projectFakeStore) SetProjectMembers(context.Context, string, *MemberRules, *AuditEntry) error {
	return errNotUsed
}
func (s *projectFakeStore) SetKeyLimits(context.Context, string, *limits.Policy, *AuditEntry) error {
	return errNotUsed
}
func (s *projectFakeStore) SetKeyProject(context.Context, string, string, *AuditEntry) error {
	return errNotUsed
}
func (s *projectFakeStore) AppendAudit(context.Context, *AuditEntry) error { return errNotUsed }
func (s *projectFakeStore) ListAudit(context.Context, int, int64) ([]*AuditEntry, error) {
	return nil, errNotUsed
}

var _ ProjectStore = (*projectFakeStore)(nil)

func budget(micros int64, period limits.Period) *limits.Budget {
	return &limits.Budget{Micros: micros, Period: period}
}

// The cache holds each key's project and own limits in its identity, and the projects
// with theirs; a change to either reaches it on the next refresh.
func TestTheCacheHoldsProjectsAndLimits(t *testing.T) {
	ctx := context.Background()
	store := newProjectFakeStore()
	store.putProject(Project{ID: "platform", Name: "Platform", Limits: &limits.Policy{Budget: budget(50_000_000, limits.PeriodMonth)}})
	secret, k := store.add(t, "ci-bot")
	store.setKey(k.ID, "platform", &limits.Policy{RPM: 60})

	c, err := NewCache(ctx, store)
	require.NoError(t, err)
	id, ok := c.Verify(secret)
	require.True(t, ok)
	assert.Equal(t, "platform", id.ProjectID)
	require.NotNil(t, id.Limits)
	assert.Equal(t, int64(60), id.Limits.RPM)
	p, ok := c.Project("platform")
	require.True(t, ok)
	assert.Equal(t, int64(50_000_000), p.Limits.Budget.Micros)
	_, ok = c.Project("ci")
	assert.False(t, ok)

	// A project's new limits, a new project and a key moved into it: one refresh.
	store.putProject(Project{ID: "platform", Name: "Platform", Limits: &limits.Policy{Budget: budget(10_000_000, limits.PeriodDay)}})
	store.putProject(Project{ID: "ci", Name: "CI"})
	store.setKey(k.ID, "ci", nil)
	require.NoError(t, c.Refresh(ctx))
	p, ok = c.Project("platform")
	require.True(t, ok)
	assert.Equal(t, limits.PeriodDay, p.Limits.Budget.Period)
	_, ok = c.Project("ci")
	assert.True(t, ok)
	id, ok = c.Verify(secret)
	require.True(t, ok)
	assert.Equal(t, "ci", id.ProjectID)
	assert.Nil(t, id.Limits, "the key's own limits were cleared")
}

// The snapshot carries each key's project, owner and limits and every project with its
// limits and member rules, so that a gateway started while its store is unreachable
// still enforces them; once the store answers, the cache takes the store's projects.
func TestTheSnapshotCarriesProjectsAndLimits(t *testing.T) {
	ctx := context.Background()
	store := newProjectFakeStore()
	path := filepath.Join(t.TempDir(), "keys.snapshot")
	opts := CacheOptions{Snapshot: path, StoreID: "db-1"}
	keyPolicy := &limits.Policy{RPM: 60, TPM: 100_000, Concurrency: 4,
		Models: map[string]*limits.Policy{"gpt-5": {Budget: budget(10_000_000, limits.PeriodMonth)}}}
	members := &MemberRules{Models: []string{"gpt-5"}, Limits: &limits.Policy{Budget: budget(5_000_000, limits.PeriodMonth)},
		Departed: DepartedRevoke, RevokeAfter: Duration(24 * time.Hour)}
	store.putProject(Project{ID: "platform", Name: "Platform team", Limits: &limits.Policy{Budget: budget(50_000_000, limits.PeriodMonth)},
		Members: members, CreatedAt: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)})
	secret, k := store.add(t, "ci-bot")
	store.keys[k.ID].Owner = "usr_ann"
	store.setKey(k.ID, "platform", keyPolicy)
	first := OpenCache(ctx, store, opts)
	_, ok := first.Verify(secret)
	require.True(t, ok)

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var f snapshotFile
	require.NoError(t, json.Unmarshal(raw, &f))
	assert.Equal(t, 2, f.Version)
	assert.NotContains(t, string(raw), secret)

	store.setDown(true)
	var logs logLines
	opts.Log = logs.log
	second := OpenCache(ctx, store, opts)
	assert.Contains(t, logs.all(), "(1 stored keys, 1 projects)")
	id, ok := second.Verify(secret)
	require.True(t, ok, "the key comes back from the snapshot")
	assert.Equal(t, "platform", id.ProjectID)
	assert.Equal(t, keyPolicy, id.Limits, "with its limits, per-model variants included")
	assert.Equal(t, "usr_ann", id.Owner, "and its owner")
	p, ok := second.Project("platform")
	require.True(t, ok, "the project comes back from the snapshot")
	assert.Equal(t, "Platform team", p.Name)
	assert.Equal(t, int64(50_000_000), p.Limits.Budget.Micros)
	assert.Equal(t, members, p.Members, "with its member rules")

	// The store answers again, without the project's limits: the store wins.
	store.putProject(Project{ID: "platform", Name: "Platform team"})
	store.setDown(false)
	require.NoError(t, second.Refresh(ctx))
	p, ok = second.Project("platform")
	require.True(t, ok)
	assert.Nil(t, p.Limits)
}

// When the keys' read reaches the store and only the projects' read fails, a start
// keeps the store's keys (a key revoked since the snapshot stays revoked) and takes the
// snapshot's projects until a refresh reads the store's.
func TestAStartWhoseProjectsReadFailsKeepsTheStoresKeys(t *testing.T) {
	ctx := context.Background()
	store := newProjectFakeStore()
	path := filepath.Join(t.TempDir(), "keys.snapshot")
	opts := CacheOptions{Snapshot: path, StoreID: "db-1"}
	store.putProject(Project{ID: "platform", Name: "platform", Limits: &limits.Policy{RPM: 5}})
	secret, k := store.add(t, "soon revoked")
	OpenCache(ctx, store, opts) // writes the snapshot
	require.NoError(t, store.RevokeKey(ctx, k.ID, time.Now()))

	store.mu.Lock()
	store.projDown = true
	store.mu.Unlock()
	c := OpenCache(ctx, store, opts)
	_, ok := c.Verify(secret)
	assert.False(t, ok, "the store's keys are served, not the snapshot's")
	p, ok := c.Project("platform")
	require.True(t, ok, "the snapshot's projects stand in")
	assert.Equal(t, int64(5), p.Limits.RPM)

	store.mu.Lock()
	store.projDown = false
	store.mu.Unlock()
	store.putProject(Project{ID: "platform", Name: "platform", Limits: &limits.Policy{RPM: 7}})
	require.NoError(t, c.Refresh(ctx))
	p, _ = c.Project("platform")
	assert.Equal(t, int64(7), p.Limits.RPM)
}

// A snapshot written before projects existed (version 1) still reads: its keys work, in
// no project and without limits.
func TestAVersion1SnapshotStillReads(t *testing.T) {
	ctx := context.Background()
	store := newProjectFakeStore()
	secret, k := store.add(t, "old")
	path := filepath.Join(t.TempDir(), "keys.snapshot")
	h := HashKey(secret)
	v1 := `{"version":1,"store":"db-1","seq":1,"written_at":"2026-05-01T00:00:00Z","keys":[` +
		`{"id":"` + k.ID + `","name":"old","sha256":"` + hex.EncodeToString(h[:]) + `","models":["m"]}]}`
	require.NoError(t, os.WriteFile(path, []byte(v1), 0o600))
	store.setDown(true)
	var logs logLines
	c := OpenCache(ctx, store, CacheOptions{Snapshot: path, StoreID: "db-1", Log: logs.log})
	id, ok := c.Verify(secret)
	require.True(t, ok, logs.all())
	assert.Equal(t, k.ID, id.KeyID)
	assert.True(t, id.MayCall("m"))
	assert.Empty(t, id.ProjectID)
	assert.Nil(t, id.Limits)

	// A version this gateway does not know is not served.
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(v1, `"version":1`, `"version":3`, 1)), 0o600))
	logs = logLines{}
	c = OpenCache(ctx, store, CacheOptions{Snapshot: path, StoreID: "db-1", Log: logs.log})
	assert.Zero(t, c.Len())
	assert.Contains(t, logs.all(), "snapshot version 3")
}

func TestProjectIDsAndActors(t *testing.T) {
	for _, ok := range []string{"platform", "ci", "a", "team-1.prod_eu", strings.Repeat("a", 64)} {
		assert.NoError(t, ValidateProjectID(ok), ok)
	}
	for _, bad := range []string{"", "Platform", "-x", ".x", "a b", "a/b", strings.Repeat("a", 65), "é"} {
		err := ValidateProjectID(bad)
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), "a-z, 0-9")
		}
	}
	ctx := context.Background()
	assert.Equal(t, "admin API", ActorOf(ctx))
	assert.Equal(t, "alice", ActorOf(WithActor(ctx, " alice ")))
	assert.Equal(t, "admin API", ActorOf(WithActor(ctx, "")))
	assert.Equal(t, `"evil\x1b[2J"`, ActorOf(WithActor(ctx, "evil\x1b[2J")), "a terminal escape is recorded quoted")
}

func TestDescribeLimits(t *testing.T) {
	assert.Equal(t, "no limits", DescribeLimits(nil))
	assert.Equal(t, "no limits", DescribeLimits(&limits.Policy{}))
	assert.Equal(t, "budget 50/month, rpm 60", DescribeLimits(&limits.Policy{RPM: 60, Budget: budget(50_000_000, limits.PeriodMonth)}))
	assert.Equal(t, "tpm 1000, concurrency 2; model a: rpm 1; model b: budget 0.5/day",
		DescribeLimits(&limits.Policy{TPM: 1000, Concurrency: 2, Models: map[string]*limits.Policy{
			"b": {Budget: budget(500_000, limits.PeriodDay)}, "a": {RPM: 1}}}))
}
