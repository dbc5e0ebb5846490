-- People, their sessions, API tokens, keys' owners and projects' rules for members' keys
-- (PostgreSQL). Same tables and meaning as the SQLite migration of the same number.

-- One row per person who has signed in through the OpenID provider, never deleted (a
-- key's owner and the audit trail name them). id is ours ("usr_…"); the provider knows
-- the person as (issuer, subject), which is what a sign-in looks them up by: an e-mail
-- can change or be given to someone else, a subject cannot. groups are the provider's
-- groups the mapping named and grants what the mapping gave, both at the last sign-in,
-- as JSON arrays: for display, never re-read as authority (a session carries its own).
CREATE TABLE users (
    id           text        NOT NULL PRIMARY KEY,
    issuer       text        NOT NULL,
    subject      text        NOT NULL,
    email        text        NOT NULL DEFAULT '',
    name         text        NOT NULL DEFAULT '',
    groups       jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(groups) = 'array'),
    grants       jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(grants) = 'array'),
    created_at   timestamptz NOT NULL,
    last_sign_in timestamptz,
    disabled_at  timestamptz,               -- NULL: may sign in
    disabled_why text        NOT NULL DEFAULT ''
);

-- A sign-in finds its person, and two sign-ins of one person never make two users.
CREATE UNIQUE INDEX users_by_subject ON users (issuer, subject);

-- One row per signed-in browser: a person (kind 'user', user_id set) or the operator
-- through the break-glass password (kind 'break_glass', name set). Only the SHA-256 of
-- the cookie's secret is kept. grants are fixed at sign-in. refresh is the provider's
-- refresh token sealed by the console (never in clear), NULL without one. Rows are
-- ended (revoked_at) rather than deleted, so the list of sessions can show who ended
-- what.
CREATE TABLE sessions (
    id           text        NOT NULL PRIMARY KEY,
    hash         bytea       NOT NULL CHECK (octet_length(hash) = 32),
    user_id      text        REFERENCES users (id),
    kind         text        NOT NULL,
    name         text        NOT NULL DEFAULT '',
    grants       jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(grants) = 'array'),
    addr         text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    refresh      bytea,
    checked_at   timestamptz
);

-- Every console call looks its session up by the cookie's hash; two sessions never
-- share a secret.
CREATE UNIQUE INDEX sessions_by_hash ON sessions (hash);
-- Disabling a person ends every session of theirs.
CREATE INDEX sessions_by_user ON sessions (user_id);
-- The list of live sessions: a range on the expiry of those not revoked, so that the
-- many ended sessions of months past are not read.
CREATE INDEX sessions_live ON sessions (expires_at) WHERE revoked_at IS NULL;

-- One row per API token, never deleted. Only the SHA-256 of the secret and a short
-- display prefix are kept. token_grant is the token's one access.Grant as a JSON
-- object ("grant" is a reserved word). Every token expires.
CREATE TABLE api_tokens (
    id           text        NOT NULL PRIMARY KEY,
    name         text        NOT NULL,
    prefix       text        NOT NULL,
    hash         bytea       NOT NULL CHECK (octet_length(hash) = 32),
    token_grant  jsonb       NOT NULL CHECK (jsonb_typeof(token_grant) = 'object'),
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    last_used_at timestamptz
);

-- Every call with a token looks it up by its hash; two tokens never share a secret.
CREATE UNIQUE INDEX api_tokens_by_hash ON api_tokens (hash);

-- A key's owner: a person's user id ("usr_…"), a service account ("svc:<name>"), or
-- NULL for a key made without one (every key stored before this migration). Not a
-- reference: a service account has no row. It never changes; a rotation's replacement
-- keeps it.
ALTER TABLE api_keys ADD COLUMN owner_id text;

-- One person's keys (the console's "my keys", usage by owner filtered to one person):
-- an equality on owner_id.
CREATE INDEX api_keys_by_owner ON api_keys (owner_id);

-- A project's rules for its members' keys (an auth.MemberRules as JSON). NULL: members
-- may not make keys in the project until an admin sets rules; '{}' is rules that
-- restrict nothing, which is not the same.
ALTER TABLE projects ADD COLUMN member_rules jsonb CHECK (member_rules IS NULL OR jsonb_typeof(member_rules) = 'object');
