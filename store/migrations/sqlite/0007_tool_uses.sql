-- Server-side tool uses (SQLite). Same change and meaning as the PostgreSQL migration of
-- the same number.
--
-- The uses of the provider's own tools each answer reported (web searches, web fetches,
-- file searches, code interpreter calls, image generations, MCP calls), as a JSON object
-- of counts: {"web_search":3}. NULL for an answer that used none, and for every row
-- stored before this migration. cost_micros already includes their price.
ALTER TABLE usage_records ADD COLUMN tool_uses TEXT;
