-- The request log (PostgreSQL). Same change and meaning as the SQLite migration of the
-- same number.
--
-- The ledger's rows become the request log: requests that were refused by a limit or
-- that no candidate answered are rows too, with zero tokens and zero cost. outcome says
-- which ('served', 'refused', 'failed'); only 'served' rows count in usage. Every row
-- stored before this migration was a served answer.
ALTER TABLE usage_records ADD COLUMN outcome text NOT NULL DEFAULT 'served'
    CHECK (outcome IN ('served', 'refused', 'failed'));
-- The limit that refused the request (key_requests, project_budget, ...), when one did.
ALTER TABLE usage_records ADD COLUMN refused_by text;
-- The upstream attempts, a JSON array of {candidate, retry, wait_ms, reason, status,
-- duration_ms}; NULL for a row without any. Never a body.
ALTER TABLE usage_records ADD COLUMN tries text;

-- The log lists newest first and pages by (ts, request_id): one index per filter, each
-- ending in (ts, request_id) so that a page is a walk down the index that stops after
-- the page's rows. The key, project and unfiltered ones replace 0002's and 0003's
-- indexes, whose leading columns they share, so that usage sums by key, project and
-- day keep their index and each write updates three new indexes, not six.
DROP INDEX usage_records_by_ts;
DROP INDEX usage_records_by_key_ts;
DROP INDEX usage_records_by_project_ts;
CREATE INDEX usage_records_by_ts ON usage_records (ts, request_id);
CREATE INDEX usage_records_by_key_ts ON usage_records (key_id, ts, request_id);
CREATE INDEX usage_records_by_project_ts ON usage_records (project_id, ts, request_id);
CREATE INDEX usage_records_by_model_ts ON usage_records (model, ts, request_id);
CREATE INDEX usage_records_by_candidate_ts ON usage_records (candidate, ts, request_id);
CREATE INDEX usage_records_by_status_ts ON usage_records (status, ts, request_id);
