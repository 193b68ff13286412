-- Policy challenges listed per workspace, newest first (`GET /v1/policy-challenges`).
CREATE INDEX policy_challenges_workspace ON policy_challenges (workspace_id, created_at, id);
