package auth

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/limits"
)

// The key snapshot is what lets a gateway start while its store is unreachable: a local
// copy of what the cache holds, rewritten (atomically, owner-only) whenever the cache
// changes. It holds exactly what the cache holds: for each usable key its id, name,
// SHA-256 hash, model allowlist, expiry, project, owner and own limits, and every project
// with its limits and member rules, so that limits keep holding when a gateway starts
// during a store outage.
// No secret, no display prefix, and no revoked key: a key revoked before the snapshot
// was written is simply not in it, so it cannot come back from it.
//
// Version 2 added the keys' projects and limits and the projects; a version-1 snapshot
// (written before them) still reads, as keys in no project without limits.

const (
	snapshotVersion       = 2
	oldestSnapshotVersion = 1
)

type snapshotFile struct {
	Version int `json:"version"`
	// Store says which store the keys came from (CacheOptions.StoreID): a snapshot of
	// another store is never served.
	Store     string        `json:"store"`
	Seq       int64         `json:"seq"`
	WrittenAt time.Time     `json:"written_at"`
	Keys      []snapshotKey `json:"keys"`
	// Projects are every project the cache holds, by id (version 2).
	Projects []*Project `json:"projects,omitempty"`
}

type snapshotKey struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Hash      string    `json:"sha256"`
	Models    []string  `json:"models,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// ProjectID and Limits are the key's (version 2).
	ProjectID string         `json:"project_id,omitempty"`
	Limits    *limits.Policy `json:"limits,omitempty"`
	// Owner is the key's (added within version 2: a snapshot without it reads as keys
	// without owners, and an older gateway ignores it).
	Owner string `json:"owner,omitempty"`
}

// snapshotOf copies what the cache holds; the caller holds c.mu for reading.
func (c *Cache) snapshotOf() *snapshotFile {
	f := &snapshotFile{Version: snapshotVersion, Store: c.opts.StoreID, Seq: c.seq, WrittenAt: time.Now().UTC(),
		Keys: make([]snapshotKey, 0, len(c.byHash))}
	for h, k := range c.byHash {
		sk := snapshotKey{ID: k.identity.KeyID, Name: k.identity.Name, Hash: hex.EncodeToString(h[:]), ExpiresAt: k.expiresAt,
			ProjectID: k.identity.ProjectID, Limits: k.identity.Limits, Owner: k.identity.Owner}
		if k.identity.Models != nil {
			sk.Models = make([]string, 0, len(k.identity.Models))
			for m := range k.identity.Models {
				sk.Models = append(sk.Models, m)
			}
			slices.Sort(sk.Models)
		}
		f.Keys = append(f.Keys, sk)
	}
	slices.SortFunc(f.Keys, func(a, b snapshotKey) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	projects := *c.projects.Load()
	f.Projects = make([]*Project, 0, len(projects))
	for _, p := range projects {
		f.Projects = append(f.Projects, p)
	}
	slices.SortFunc(f.Projects, func(a, b *Project) int { return strings.Compare(a.ID, b.ID) })
	return f
}

// writeSnapshot replaces the file at path with f: written to a temporary file in the
// same directory (readable by its owner only, like the SQLite file), synced, then
// renamed over the old one, so a reader or a crash sees the old snapshot or the new,
// never half of one.
func writeSnapshot(path string, f *snapshotFile) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp") // mode 0600
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	ok = true
	if d, err := os.Open(dir); err == nil { // make the rename itself durable
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// errNoSnapshot is a snapshot file that does not exist.
var errNoSnapshot = errors.New("no key snapshot")

// snapshotState is what a snapshot gives the cache.
type snapshotState struct {
	byHash   map[Hash]*cachedKey
	hashOf   map[string]Hash
	projects map[string]*Project
	file     *snapshotFile
}

// readSnapshot loads the keys and projects of a snapshot of the store storeID.
func readSnapshot(path, storeID string) (*snapshotState, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNoSnapshot
	}
	if err != nil {
		return nil, err
	}
	var f snapshotFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: not a key snapshot: %v", path, err)
	}
	switch {
	case f.Version < oldestSnapshotVersion || f.Version > snapshotVersion:
		return nil, fmt.Errorf("%s: snapshot version %d, want %d to %d", path, f.Version, oldestSnapshotVersion, snapshotVersion)
	case f.Store != storeID:
		return nil, fmt.Errorf("%s: a snapshot of another store", path)
	}
	byHash := make(map[Hash]*cachedKey, len(f.Keys))
	hashOf := make(map[string]Hash, len(f.Keys))
	for _, sk := range f.Keys {
		var h Hash
		if n, err := hex.Decode(h[:], []byte(sk.Hash)); err != nil || n != len(h) || len(sk.Hash) != 2*len(h) {
			return nil, fmt.Errorf("%s: key %q: not a SHA-256 hash", path, sk.ID)
		}
		if sk.ID == "" {
			return nil, fmt.Errorf("%s: a key without an id", path)
		}
		if err := sk.Limits.Validate(); err != nil {
			return nil, fmt.Errorf("%s: key %q: limits: %v", path, sk.ID, err)
		}
		k := &Key{ID: sk.ID, Name: sk.Name, Models: sk.Models, ProjectID: sk.ProjectID, Limits: NormalizeLimits(sk.Limits), Owner: sk.Owner}
		byHash[h] = &cachedKey{identity: identityOf(k), expiresAt: sk.ExpiresAt}
		hashOf[sk.ID] = h
	}
	projects := make(map[string]*Project, len(f.Projects))
	for _, p := range f.Projects {
		if p == nil || ValidateProjectID(p.ID) != nil {
			return nil, fmt.Errorf("%s: a project without a valid id", path)
		}
		if err := p.Limits.Validate(); err != nil {
			return nil, fmt.Errorf("%s: project %q: limits: %v", path, p.ID, err)
		}
		p.Limits = NormalizeLimits(p.Limits)
		if r := p.Members; r != nil {
			if err := errors.Join(r.KeyLimits.Validate(), r.Limits.Validate()); err != nil {
				return nil, fmt.Errorf("%s: project %q: member rules: %v", path, p.ID, err)
			}
			r.KeyLimits, r.Limits = NormalizeLimits(r.KeyLimits), NormalizeLimits(r.Limits)
		}
		projects[p.ID] = p
	}
	return &snapshotState{byHash: byHash, hashOf: hashOf, projects: projects, file: &f}, nil
}
