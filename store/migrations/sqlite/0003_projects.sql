-- Projects, limits and the audit trail (SQLite). Same tables and meaning as the
-- PostgreSQL migration of the same number.

-- One row per project, never deleted. id is the operator's slug ("platform"). limits is
-- a limits.Policy as JSON, NULL when the project limits nothing. seq comes from the same
-- counter as api_keys.seq ('api_keys' in sequences), taken inside the writing
-- transaction, so a gateway's cache picks up a project's change exactly as a key's.
CREATE TABLE projects (
    id         TEXT    NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    limits     TEXT    CHECK (limits IS NULL OR json_type(limits) = 'object'),
    created_at INTEGER NOT NULL,
    seq        INTEGER NOT NULL
) STRICT;

-- ProjectsChangedSince, as api_keys_by_seq.
CREATE UNIQUE INDEX projects_by_seq ON projects (seq);

-- A key's project (NULL: none) and its own limits (a limits.Policy as JSON; NULL: none).
-- Rows of keys stored before this migration get NULL in both: no project, no limits.
ALTER TABLE api_keys ADD COLUMN project_id TEXT REFERENCES projects (id);
ALTER TABLE api_keys ADD COLUMN limits TEXT CHECK (limits IS NULL OR json_type(limits) = 'object');

-- Every change to a key, a project or their limits: who, what, to what, when. Entries
-- are only ever added. AUTOINCREMENT: an id is never given twice, so a page of the
-- trail ("before id N") never shifts.
CREATE TABLE audit_log (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    at     INTEGER NOT NULL,
    actor  TEXT    NOT NULL,
    action TEXT    NOT NULL,
    target TEXT    NOT NULL,
    detail TEXT    NOT NULL DEFAULT ''
) STRICT;

-- The project of the request's key when it was metered (NULL: none). Not a reference:
-- a record stays what it was when its key moves to another project. Records stored
-- before this migration have NULL: their spend counts for their key only.
ALTER TABLE usage_records ADD COLUMN project_id TEXT;

-- A project's spend over a period (the limits' seeding): an equality on project_id,
-- then a range on ts. A key's uses usage_records_by_key_ts. A per-model variant filters
-- those ranges by model: seeding is rare (start, a period's rollover), and an index per
-- (scope, model) would slow every ledger write for it.
CREATE INDEX usage_records_by_project_ts ON usage_records (project_id, ts);
