//! Policy as code: the spec language ([`spec`]), its compilation to a validated Cedar policy
//! set ([`compile`]), evaluation of a check against it ([`evaluate`]) and the differences
//! between two versions ([`diff`]) are pure: no tokio, sqlx or axum. The use cases on top —
//! [`check`] (the decision hot path) and [`sync`] (dry run and apply) — use the store, the
//! caches and the group-commit writer.

pub mod check;
pub mod compile;
pub mod diff;
pub mod evaluate;
pub mod limits;
pub mod source;
pub mod spec;
pub mod sync;

pub use compile::{compile, CompiledPolicy};
pub use evaluate::{evaluate, Decision, EmailFacts, Facts};
pub use spec::{Outcome, PolicySpec, SpecError};

#[cfg(test)]
mod tests;
