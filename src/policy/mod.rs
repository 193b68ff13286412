//! Policy as code: the spec language ([`spec`]), its compilation to a validated Cedar policy
//! set ([`compile`]), evaluation of a check against it ([`evaluate`]) and the differences
//! between two versions ([`diff`]). Everything here is pure: no tokio, sqlx or axum.

pub mod compile;
pub mod diff;
pub mod evaluate;
pub mod spec;

pub use compile::{compile, CompiledPolicy};
pub use evaluate::{evaluate, Decision, EmailFacts, Facts};
pub use spec::{Outcome, PolicySpec, SpecError};

#[cfg(test)]
mod tests;
