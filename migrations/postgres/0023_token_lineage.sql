-- A personal access token made with another token records its maker: revoking a token revokes
-- the tokens it made, transitively, and a token whose maker (or any maker above it) is revoked
-- or expired authenticates nothing.
ALTER TABLE personal_access_tokens ADD COLUMN parent_id TEXT REFERENCES personal_access_tokens(id);
CREATE INDEX personal_access_tokens_parent ON personal_access_tokens (parent_id);
