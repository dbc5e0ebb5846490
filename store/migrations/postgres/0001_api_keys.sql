-- API keys (PostgreSQL). Same tables and meaning as the SQLite migration of the same
-- number; types are PostgreSQL's own (timestamptz, bytea, text[]).

-- Orders every write to a key. nextval() alone does not give commit order (a
-- transaction can take a number and commit after one that took a later number), so
-- writers also hold a transaction-scoped advisory lock while they take the number and
-- until they commit; see store/postgres.go.
CREATE SEQUENCE api_keys_seq AS bigint;

-- One row per key, never deleted (revoked and expired keys stay, for listing and for
-- the usage ledger, whose rows will refer to api_keys.id). Only the SHA-256 of the
-- secret and a short display prefix are kept: the secret itself never reaches the
-- database.
CREATE TABLE api_keys (
    id           text        NOT NULL PRIMARY KEY,
    name         text        NOT NULL,
    prefix       text        NOT NULL,
    hash         bytea       NOT NULL CHECK (octet_length(hash) = 32),
    models       text[],     -- NULL: every model
    created_at   timestamptz NOT NULL,
    last_used_at timestamptz,
    expires_at   timestamptz,
    revoked_at   timestamptz,
    replaced_by  text        REFERENCES api_keys (id),
    seq          bigint      NOT NULL
);

-- Two keys must never share a secret.
CREATE UNIQUE INDEX api_keys_by_hash ON api_keys (hash);
-- ChangedSince: a range scan from the last seq a gateway saw; when nothing changed it
-- is one probe at the right edge of this index.
CREATE UNIQUE INDEX api_keys_by_seq ON api_keys (seq);
-- ListKeys: newest first.
CREATE INDEX api_keys_by_created ON api_keys (created_at DESC, id DESC);
