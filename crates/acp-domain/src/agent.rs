//! An agent's lifecycle status and its risk tier.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A metadata or label value as a group's selector compares it: a string as is, a boolean or a
/// number as JSON writes it; nothing for other values (they never match).
pub fn selector_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// An agent's metadata as the pairs a selector can match (see [`selector_text`]).
pub fn metadata_pairs(metadata: &Value) -> Vec<(String, String)> {
    metadata
        .as_object()
        .map(|map| {
            map.iter()
                .filter_map(|(k, v)| selector_text(v).map(|v| (k.clone(), v)))
                .collect()
        })
        .unwrap_or_default()
}

/// Where an agent is in its lifecycle: registered (`pending`), attested and claimed (`active`),
/// paused by its workspace (`suspended`) or gone for good (`revoked`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentStatus {
    Pending,
    Active,
    Suspended,
    Revoked,
}

impl AgentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Active => "active",
            Self::Suspended => "suspended",
            Self::Revoked => "revoked",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "pending" => Some(Self::Pending),
            "active" => Some(Self::Active),
            "suspended" => Some(Self::Suspended),
            "revoked" => Some(Self::Revoked),
            _ => None,
        }
    }
}

/// How far an agent is trusted, from provider feedback: `low`, `medium` or `high` risk. Policies
/// name a tier (`max_risk_tier`), and the stored agent carries the tier its score gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RiskTier {
    Low,
    Medium,
    High,
}

/// Reputation decays: a score halves every 7 days without feedback, so recent feedback weighs
/// more than old.
pub const REPUTATION_HALF_LIFE_MS: f64 = 7.0 * 86_400_000.0;

impl RiskTier {
    pub fn level(self) -> i64 {
        match self {
            Self::Low => 0,
            Self::Medium => 1,
            Self::High => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "low" => Some(Self::Low),
            "medium" => Some(Self::Medium),
            "high" => Some(Self::High),
            _ => None,
        }
    }

    /// The tier of a reputation score: `low` below 1, `medium` below 3, `high` from 3; one bad
    /// report makes an agent medium, three recent ones high.
    pub fn of_score(score: f64) -> Self {
        // To three decimals: feedback seconds apart has barely decayed and counts in full.
        let score = (score * 1000.0).round() / 1000.0;
        if score < 1.0 {
            Self::Low
        } else if score < 3.0 {
            Self::Medium
        } else {
            Self::High
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_tiers_read_back_what_they_write() {
        for s in [
            AgentStatus::Pending,
            AgentStatus::Active,
            AgentStatus::Suspended,
            AgentStatus::Revoked,
        ] {
            assert_eq!(AgentStatus::parse(s.as_str()), Some(s));
        }
        for t in [RiskTier::Low, RiskTier::Medium, RiskTier::High] {
            assert_eq!(RiskTier::parse(t.as_str()), Some(t));
        }
        assert_eq!(AgentStatus::parse("Active"), None);
        assert_eq!(RiskTier::parse("severe"), None);
    }

    #[test]
    fn a_score_falls_in_its_tier_to_three_decimals() {
        assert_eq!(RiskTier::of_score(0.0), RiskTier::Low);
        assert_eq!(RiskTier::of_score(0.9994), RiskTier::Low);
        assert_eq!(RiskTier::of_score(0.9996), RiskTier::Medium);
        assert_eq!(RiskTier::of_score(2.5), RiskTier::Medium);
        assert_eq!(RiskTier::of_score(3.0), RiskTier::High);
    }
}
