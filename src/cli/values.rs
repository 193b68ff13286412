//! The values of the enum-like flags (filters, roles): the parser refuses any other and names
//! the allowed ones, so `--decision maybe` is an error instead of a filter that matches nothing.

use clap::ValueEnum;

/// An agent's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AgentStatus {
    Pending,
    Active,
    Suspended,
    Revoked,
}

/// An agent's risk tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RiskTier {
    Low,
    Medium,
    High,
}

/// When an agent last sent a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Seen {
    /// In the last hour
    Hour,
    /// In the last day
    Day,
    /// Seen, but not in the last day
    Stale,
    /// Never
    Never,
}

/// A decision of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Decision {
    Allow,
    Challenge,
    Deny,
}

/// A policy challenge's status, or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChallengeStatus {
    Pending,
    Approved,
    Denied,
    Expired,
    All,
}

/// A person's role in a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// Everything, ownership included
    Owner,
    /// Changes anything but ownership
    Admin,
    /// Reads, and approves or denies policy challenges
    Approver,
    /// Reads
    Member,
}

/// The value as the parser (and the API) spell it.
pub fn name<T: ValueEnum>(value: T) -> String {
    value
        .to_possible_value()
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
}

impl Role {
    pub fn domain(self) -> crate::domain::Role {
        match self {
            Role::Owner => crate::domain::Role::Owner,
            Role::Admin => crate::domain::Role::Admin,
            Role::Approver => crate::domain::Role::Approver,
            Role::Member => crate::domain::Role::Member,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_values_are_those_the_api_takes() {
        for s in AgentStatus::value_variants() {
            assert!(crate::domain::AgentStatus::parse(&name(*s)).is_some());
        }
        for t in RiskTier::value_variants() {
            assert!(crate::domain::RiskTier::parse(&name(*t)).is_some());
        }
        for r in Role::value_variants() {
            assert_eq!(r.domain().as_str(), name(*r));
        }
        assert_eq!(name(ChallengeStatus::Expired), "expired");
        assert_eq!(name(Seen::Stale), "stale");
        assert_eq!(name(Decision::Challenge), "challenge");
    }
}
