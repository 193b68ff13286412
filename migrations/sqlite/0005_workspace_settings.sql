-- Workspace-wide settings. `require_member_approval`: an approval link only works for a
-- logged-in member of the workspace (stronger than possession of the link).
CREATE TABLE workspace_settings (
    workspace_id            TEXT PRIMARY KEY REFERENCES workspaces(id),
    require_member_approval INTEGER NOT NULL DEFAULT 0,
    updated_at              INTEGER NOT NULL
);
