-- The channel each record's answer came through ('api': the family's own API;
-- 'bedrock', 'vertex', 'azure'), so usage can be summed by channel. Every record stored
-- before channels existed came through the family's own API.
ALTER TABLE usage_records ADD COLUMN channel TEXT NOT NULL DEFAULT 'api';
