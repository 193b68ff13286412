//! `acp`, the agent control plane.
//!
//! One library and one binary: the HTTP server (`acp serve`) and the admin tools share the
//! modules below. Dependency direction: `http` and `cli` sit on top, the use cases
//! (`identity`, `telemetry`, `audit`) in the middle, `store` at the bottom; nothing below
//! imports anything above it.
#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod audit;
pub mod cache;
pub mod cli;
pub mod config;
pub mod context;
pub mod enforce;
pub mod error;
pub mod http;
pub mod identity;
pub mod ids;
pub mod mail;
pub mod policy;
pub mod secret;
pub mod site;
pub mod store;
pub mod telemetry;
pub mod time;
