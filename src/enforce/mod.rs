//! Enforcement around decisions: approvals of `challenge` decisions.

pub mod approvals;
pub mod credentials;
