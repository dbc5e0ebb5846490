-- Usage ledger (PostgreSQL). Same tables and meaning as the SQLite migration of the
-- same number.

-- One row per metered request, written by the gateways' ledgers (metering.Ledger) in
-- batches. request_id makes a replayed batch harmless: a row already stored is skipped.
-- key_id is not a reference to api_keys: keys from the configuration ("static:name")
-- are not in that table, and a request may have no key at all (NULL).
CREATE TABLE usage_records (
    request_id   text        NOT NULL PRIMARY KEY,
    key_id       text,
    model        text        NOT NULL,
    candidate    text        NOT NULL,
    protocol     text        NOT NULL,
    operation    text        NOT NULL,
    status       integer     NOT NULL,
    input        bigint      NOT NULL,
    cached_input bigint      NOT NULL,
    cache_write  bigint      NOT NULL,
    output       bigint      NOT NULL,
    reasoning    bigint      NOT NULL,
    estimated    boolean     NOT NULL,
    cost_micros  bigint      NOT NULL, -- integer micro-units of the configured currency
    latency_ms   bigint      NOT NULL,
    ttfb_ms      bigint      NOT NULL,
    attempts     integer     NOT NULL,
    ts           timestamptz NOT NULL  -- when the request ended
);

-- One key's usage over a period: an equality on key_id, then a range on ts.
CREATE INDEX usage_records_by_key_ts ON usage_records (key_id, ts);
-- Everyone's usage over a period (a day's report, by key or model).
CREATE INDEX usage_records_by_ts ON usage_records (ts);

-- How far each gateway's journal has been written into usage_records. It is updated
-- in the transaction that inserts the records, so after a crash the ledger resumes
-- exactly after the last batch that committed. It only moves forward.
CREATE TABLE ledger_journals (
    journal_id text        NOT NULL PRIMARY KEY,
    position   bigint      NOT NULL CHECK (position >= 0),
    updated_at timestamptz NOT NULL
);
