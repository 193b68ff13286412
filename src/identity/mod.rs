//! Agent identity: keys and signatures, signed requests, API keys, and the agent use cases.

pub mod accounts;
pub mod agents;
pub mod api_keys;
pub mod error;
pub mod keys;
pub mod signing;
pub mod verify;

pub use error::{IdentityError, IdentityResult};
