//! A `challenge` decision waiting for a human: its status and the lifetimes that the decision
//! path (which opens challenges) and the approval flow (which closes them) share.

/// How long an approval link stays valid when the policy's approval block sets no `ttl_secs`.
pub const CHALLENGE_TTL_MS: i64 = 300_000;

/// How long a human's answer (an approval or a deny) counts for re-checks of the same request.
pub const DECISION_TTL_MS: i64 = CHALLENGE_TTL_MS;

/// At most this many approval mails go out for one agent's challenges within
/// [`APPROVAL_MAIL_WINDOW_MS`] (besides the rule of one mail per open request): an agent that
/// keeps asking cannot flood its approvers.
pub const APPROVAL_MAILS_PER_AGENT: i64 = 20;

/// The window of [`APPROVAL_MAILS_PER_AGENT`]: an hour.
pub const APPROVAL_MAIL_WINDOW_MS: i64 = 3_600_000;

/// How the audit trail and a challenge's `decided_by` name someone who decided through the
/// approval link alone, logged in as nobody.
pub const DECIDED_BY_LINK: &str = "approval_link";

/// Who raised a challenge, which decides who may decide it. Whoever a challenge holds never
/// receives a token that can decide it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raiser {
    /// A backend asked about an agent (`/v1/check`, a mint, an email send): the backend gets
    /// the approval link to hand to a human, and the workspace may let the link alone decide.
    Backend,
    /// The agent asked for itself in a request it signed (the vault's agent side): it gets the
    /// challenge id and a status link only, and only a logged-in approver decides.
    Agent,
}

impl Raiser {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Backend => "backend",
            Self::Agent => "agent",
        }
    }

    /// Anything unknown reads as `agent`, the stricter of the two.
    pub fn parse(text: &str) -> Self {
        match text {
            "backend" => Self::Backend,
            _ => Self::Agent,
        }
    }
}

/// A policy challenge's status. Only `pending`, `approved` and `denied` are stored; `expired`
/// is what a pending challenge past its expiry is shown as (see [`ChallengeStatus::at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeStatus {
    Pending,
    Approved,
    Denied,
    Expired,
}

impl ChallengeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "pending" => Some(Self::Pending),
            "approved" => Some(Self::Approved),
            "denied" => Some(Self::Denied),
            "expired" => Some(Self::Expired),
            _ => None,
        }
    }

    /// The status as callers see it at `now`: a pending challenge past `expires_at` is expired.
    pub fn at(self, expires_at: i64, now: i64) -> Self {
        if self == Self::Pending && now >= expires_at {
            Self::Expired
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_challenge_expires_and_a_decided_one_does_not() {
        assert_eq!(ChallengeStatus::Pending.at(10, 9), ChallengeStatus::Pending);
        assert_eq!(
            ChallengeStatus::Pending.at(10, 10),
            ChallengeStatus::Expired
        );
        assert_eq!(
            ChallengeStatus::Approved.at(10, 99),
            ChallengeStatus::Approved
        );
        for s in ["pending", "approved", "denied", "expired"] {
            assert_eq!(
                ChallengeStatus::parse(s).map(ChallengeStatus::as_str),
                Some(s)
            );
        }
    }
}
