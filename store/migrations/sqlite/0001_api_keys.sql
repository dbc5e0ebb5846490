-- API keys (SQLite). Every table is STRICT, so a value of the wrong type is an error,
-- not a silent conversion. Times are Unix microseconds (UTC), NULL when unset: the
-- same precision PostgreSQL's timestamptz keeps.

-- Named counters. 'api_keys' orders every write to a key: it is read and incremented
-- inside the writing transaction, and SQLite lets one writer at a time commit, so the
-- order of the numbers is the order in which the changes became visible.
CREATE TABLE sequences (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) STRICT;

INSERT INTO sequences (name, value) VALUES ('api_keys', 0);

-- One row per key, never deleted (revoked and expired keys stay, for listing and for
-- the usage ledger, whose rows will refer to api_keys.id). Only the SHA-256 of the
-- secret and a short display prefix are kept: the secret itself never reaches the
-- database.
CREATE TABLE api_keys (
    id           TEXT    NOT NULL PRIMARY KEY,
    name         TEXT    NOT NULL,
    prefix       TEXT    NOT NULL,
    hash         BLOB    NOT NULL CHECK (length(hash) = 32),
    models       TEXT    CHECK (models IS NULL OR json_type(models) = 'array'), -- NULL: every model
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    expires_at   INTEGER,
    revoked_at   INTEGER,
    replaced_by  TEXT    REFERENCES api_keys (id),
    seq          INTEGER NOT NULL
) STRICT;

-- Two keys must never share a secret.
CREATE UNIQUE INDEX api_keys_by_hash ON api_keys (hash);
-- ChangedSince: a range scan from the last seq a gateway saw; when nothing changed it
-- is one probe at the right edge of this index.
CREATE UNIQUE INDEX api_keys_by_seq ON api_keys (seq);
-- ListKeys: newest first.
CREATE INDEX api_keys_by_created ON api_keys (created_at DESC, id DESC);
