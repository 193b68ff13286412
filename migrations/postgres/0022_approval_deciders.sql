-- Who decides a challenge. Whoever a challenge holds never receives a token that can decide it:
-- `raised_by` tells a challenge raised by a backend (`/v1/check`, mint, send: `backend`) from
-- one an agent raised itself in its own signed request (the vault's agent side: `agent`), whose
-- approval link never reaches the agent and never works without a logged-in approver.
-- `approvers`: the emails the deciding rules name (a JSON array, lower case); a logged-in person
-- named there may decide besides the workspace's approvers, admins and owners.
ALTER TABLE policy_challenges ADD COLUMN raised_by TEXT NOT NULL DEFAULT 'backend';
ALTER TABLE policy_challenges ADD COLUMN approvers TEXT NOT NULL DEFAULT '[]';

-- Approvals by a logged-in person are now the default: possession of a backend's approval link
-- is enough only where a workspace turns `require_member_approval` off again.
UPDATE workspace_settings SET require_member_approval = 1;

-- The approval mail of a challenge goes out once per agent and request fingerprint while a
-- challenge for it is open: this row says which challenge was mailed and until when it counts.
CREATE TABLE approval_notices (
    workspace_id  TEXT NOT NULL,
    agent_id      TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    challenge_id  TEXT NOT NULL,
    notified_at   BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, agent_id, fingerprint)
);
-- How many approval mails an agent's challenges caused in its current window (an hour from
-- its first mail): one row per agent, moved by one statement, so replicas count together.
CREATE TABLE approval_mail_counts (
    workspace_id  TEXT NOT NULL,
    agent_id      TEXT NOT NULL,
    window_start  BIGINT NOT NULL,
    sent          BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, agent_id)
);
ALTER TABLE workspace_settings ALTER COLUMN require_member_approval SET DEFAULT 1;
