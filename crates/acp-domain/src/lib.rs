//! The ground floor: the service's own types, parsed once at the edge (a request, a row, a
//! setting) and passed on typed, never as loose strings, and the lifetimes and limits that more
//! than one module reads. Nothing here does I/O or knows HTTP, SQL or a use case; every other
//! module may import from here (see `docs/architecture.md`, "Layers").

pub mod access;
pub mod agent;
pub mod challenge;
pub mod credential;
pub mod email;
pub mod ids;
pub mod input;
pub mod mcp;
pub mod member;
pub mod refusal;
pub mod signup;
pub mod time;
pub mod vault_action;

pub use access::{Denied, Need, Scopes};
pub use agent::{AgentStatus, RiskTier};
pub use challenge::{ChallengeStatus, Raiser};
pub use email::{EmailAddress, EmailError};
pub use input::FieldError;
pub use member::Role;
pub use refusal::{Refusal, RefusalKind};
pub use signup::Signup;
pub use vault_action::VaultAction;
