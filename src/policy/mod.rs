//! Policy as code: the spec language ([`spec`]), its compilation to a validated Cedar policy
//! set ([`compile`]), evaluation of a check against it ([`evaluate`]) and the differences
//! between two versions ([`diff`]) are the engine, a crate of its own (`crates/acp-engine`):
//! no tokio, sqlx, axum or mail, no thread-locals. The
//! replica's caches ([`cache`]: API keys, agents, compiled policies, kept decisions) sit on the
//! store; the use cases on top, [`check`] (the decision hot path) and [`sync`] (dry run and
//! apply), use the caches, the store and the group-commit writer.
//!
//! `POST /v1/check` reads top to bottom: [`cache`] (the key, the agent and the compiled policy
//! under one view of the workspace), [`evaluate`] (the decision), [`check`] (the use case).

pub mod access;
pub mod cache;
pub mod check;
pub mod error;
pub mod impact;
pub mod rate;
mod reaper;
pub mod sync;

// The engine: a crate of its own (`crates/acp-engine`), its modules named here as before.
pub use acp_engine::{
    bench, challenge, compile, diff, evaluate, layout, limits, lint, semantic, source, spec,
};
pub use acp_engine::{CompiledPolicy, ContextFields, Decision, EmailFacts};
pub use acp_engine::{Facts, Outcome, PolicySpec, SpecError};
