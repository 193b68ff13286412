-- Scopes that narrow an API key or a personal access token (space-separated; NULL is none).
ALTER TABLE api_keys ADD COLUMN scopes TEXT;
ALTER TABLE personal_access_tokens ADD COLUMN scopes TEXT;
