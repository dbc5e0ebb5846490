-- The alerts' outbox (SQLite). Same table and meaning as the PostgreSQL migration of the
-- same number.

-- One row per event and webhook. webhook is a hash of the webhook's URL (the URL may hold
-- a token and is not stored). dedupe names the event (kind, subject, threshold or state,
-- period): two gateways noticing the same crossing store one row. event is the event as
-- JSON; the body is rendered from it at each try. Times are unix microseconds.
-- claimed_by and claimed_until are a lease: a gateway sends only rows it has claimed,
-- and takes a row from another only once that gateway's lease has run out.
CREATE TABLE alert_outbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook       TEXT    NOT NULL,
    dedupe        TEXT    NOT NULL,
    kind          TEXT    NOT NULL,
    event         TEXT    NOT NULL,
    state         TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed')),
    attempts      INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    next_at       INTEGER NOT NULL,
    claimed_by    TEXT,
    claimed_until INTEGER NOT NULL DEFAULT 0,
    sent_at       INTEGER,
    last_error    TEXT    NOT NULL DEFAULT '',
    UNIQUE (webhook, dedupe)
) STRICT;

-- Claim's search: pending rows by due time.
CREATE INDEX alert_outbox_due ON alert_outbox (state, next_at);
