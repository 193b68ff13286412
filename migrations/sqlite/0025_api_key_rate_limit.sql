-- An API key's own rate: decisions (and other API-key requests) per second per replica; NULL
-- for the server's default (`api_key_rate_limit`), 0 for none.
ALTER TABLE api_keys ADD COLUMN rate_limit INTEGER;
