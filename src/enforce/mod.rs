//! Enforcement around decisions: approvals of `challenge` decisions, credentials (opaque and
//! JWT) with the kill switch, token exchange, and policy-gated email sending.

pub mod approvals;
pub mod credentials;
pub mod email;
pub mod error;
pub mod jwt;

pub use error::{EnforceError, EnforceResult};
