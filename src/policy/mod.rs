//! Policy as code: the spec language ([`spec`]), its compilation to a validated Cedar policy
//! set ([`compile`]), evaluation of a check against it ([`evaluate`]) and the differences
//! between two versions ([`diff`]) are pure: no tokio, sqlx or axum, no thread-locals. The
//! replica's caches ([`cache`]: API keys, agents, compiled policies, kept decisions) sit on the
//! store; the use cases on top, [`check`] (the decision hot path) and [`sync`] (dry run and
//! apply), use the caches, the store and the group-commit writer.
//!
//! `POST /v1/check` reads top to bottom: [`cache`] (the key, the agent and the compiled policy
//! under one view of the workspace), [`evaluate`] (the decision), [`check`] (the use case).

pub mod bench;
pub mod cache;
pub mod challenge;
pub mod check;
pub mod compile;
pub mod diff;
pub mod error;
pub mod evaluate;
pub mod impact;
pub mod layout;
pub mod limits;
pub mod lint;
mod memo;
pub mod rate;
mod reaper;
pub mod semantic;
pub mod source;
pub mod spec;
pub mod sync;

pub use compile::{compile, CompiledPolicy};
pub use evaluate::{evaluate, ContextFields, Decision, EmailFacts, Facts};
pub use spec::{Outcome, PolicySpec, SpecError};

#[cfg(test)]
mod tests;
