-- Usage ledger (SQLite). Same tables and meaning as the PostgreSQL migration of the same
-- number. Times are Unix microseconds (UTC), like the other tables.

-- One row per metered request, written by the gateways' ledgers (metering.Ledger) in
-- batches. request_id makes a replayed batch harmless: a row already stored is skipped.
-- key_id is not a reference to api_keys: keys from the configuration ("static:name")
-- are not in that table, and a request may have no key at all (NULL). An ordinary rowid
-- table: the secondary indexes below then point at a row by its integer rowid.
CREATE TABLE usage_records (
    request_id   TEXT    NOT NULL PRIMARY KEY,
    key_id       TEXT,
    model        TEXT    NOT NULL,
    candidate    TEXT    NOT NULL,
    protocol     TEXT    NOT NULL,
    operation    TEXT    NOT NULL,
    status       INTEGER NOT NULL,
    input        INTEGER NOT NULL,
    cached_input INTEGER NOT NULL,
    cache_write  INTEGER NOT NULL,
    output       INTEGER NOT NULL,
    reasoning    INTEGER NOT NULL,
    estimated    INTEGER NOT NULL CHECK (estimated IN (0, 1)),
    cost_micros  INTEGER NOT NULL, -- integer micro-units of the configured currency
    latency_ms   INTEGER NOT NULL,
    ttfb_ms      INTEGER NOT NULL,
    attempts     INTEGER NOT NULL,
    ts           INTEGER NOT NULL  -- when the request ended
) STRICT;

-- One key's usage over a period: an equality on key_id, then a range on ts.
CREATE INDEX usage_records_by_key_ts ON usage_records (key_id, ts);
-- Everyone's usage over a period (a day's report, by key or model).
CREATE INDEX usage_records_by_ts ON usage_records (ts);

-- How far each gateway's journal has been written into usage_records. It is updated
-- in the transaction that inserts the records, so after a crash the ledger resumes
-- exactly after the last batch that committed. It only moves forward.
CREATE TABLE ledger_journals (
    journal_id TEXT    NOT NULL PRIMARY KEY,
    position   INTEGER NOT NULL CHECK (position >= 0),
    updated_at INTEGER NOT NULL
) STRICT;
