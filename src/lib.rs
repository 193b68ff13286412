//! `acp`, the agent control plane.
//!
//! One library and one binary: the HTTP server (`acp serve`) and the admin tools share the
//! modules below, in four layers (`docs/architecture.md`, "Layers"): `domain` (with `time`,
//! `secret` and `observe`) at the bottom; `api`, `config`, `store` and `mail` above it; the use cases and
//! their `context` above those; `error`, `http`, `cli` and `app` on top. Nothing imports from a
//! layer above it and no modules import each other in a circle (checked by `layers_test`).
#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod audit;
pub mod cli;
pub mod config;
pub mod context;
pub mod domain;
pub mod enforce;
pub mod error;
pub mod http;
pub mod identity;
pub mod mail;
pub mod observe;
pub mod policy;
pub mod secret;
pub mod site;
pub mod store;
pub mod telemetry;
pub mod time;

#[cfg(test)]
mod layers_test;
