-- The alerts' outbox (PostgreSQL). Same table and meaning as the SQLite migration of the
-- same number: one row per event and webhook, deduplicated by (webhook, dedupe), leased
-- to one gateway at a time by claimed_by and claimed_until. Times are unix microseconds,
-- as in SQLite, so the claim is the same statement on both.
CREATE TABLE alert_outbox (
    id            bigserial PRIMARY KEY,
    webhook       text      NOT NULL,
    dedupe        text      NOT NULL,
    kind          text      NOT NULL,
    event         text      NOT NULL,
    state         text      NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed')),
    attempts      integer   NOT NULL DEFAULT 0,
    created_at    bigint    NOT NULL,
    next_at       bigint    NOT NULL,
    claimed_by    text,
    claimed_until bigint    NOT NULL DEFAULT 0,
    sent_at       bigint,
    last_error    text      NOT NULL DEFAULT '',
    UNIQUE (webhook, dedupe)
);

CREATE INDEX alert_outbox_due ON alert_outbox (state, next_at);
