//! `acp`, the agent control plane.
//!
//! One library and one binary: the HTTP server (`acp serve`) and the admin tools share the
//! modules below, in four layers (`docs/architecture.md`, "Layers"): `domain` (with `time`,
//! `secret` and `observe`) at the bottom; `api`, `config`, `store`, `mail` and the policy engine
//! above it; the use cases and their `context` above those; `error`, `http`, `cli` and `app` on
//! top. Nothing imports from a layer above it and no modules import each other in a circle
//! (checked by `layers_test`). The domain types and the policy engine are crates of their own
//! (`crates/acp-domain`, `crates/acp-engine`), so the compiler holds their floors: `domain` and
//! `time` here are the domain crate, and `policy` re-exports the engine's modules beside its use
//! cases.
#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod audit;
pub mod cli;
pub mod config;
pub mod context;
pub mod enforce;
pub mod error;
pub mod http;
pub mod identity;
pub mod mail;
pub mod mcp;
pub mod net;
pub mod observe;
pub mod policy;
pub mod secret;
pub mod site;
pub mod store;
pub mod telemetry;
pub mod vault;

pub use acp_domain as domain;
pub use acp_domain::time;

#[cfg(test)]
mod layers_test;
