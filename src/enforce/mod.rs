//! Enforcement around decisions: approvals of `challenge` decisions, credentials (opaque and
//! JWT) with the kill switch, token exchange, and policy-gated email sending.

pub mod approvals;
pub mod credentials;
pub mod egress;
pub mod email;
pub mod error;
pub mod jwt;
pub mod leases;
pub mod vault;
pub mod vault_agent;
pub mod vault_proxy;

pub use error::{EnforceError, EnforceResult};
