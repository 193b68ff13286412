//! The integration suite: one test binary, real servers on 127.0.0.1:0, real HTTP. Every test
//! runs on a fresh SQLite file and, when `ACP_TEST_POSTGRES_URL` is set at build time, again on
//! a fresh Postgres database.

// Test code: a failed unwrap is a failed test, which is what it should be.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails at the first unexpected answer"
)]

mod helpers;
mod smtp;
mod upstream;

mod access;
mod access_log;
mod access_review;
mod agents;
mod approvals;
mod audit;
mod backup;
mod bad_input;
#[cfg(acp_browser)]
mod browser;
#[cfg(acp_browser)]
mod browser_credentials;
#[cfg(acp_browser)]
mod browser_phone;
#[cfg(acp_browser)]
mod browser_vault;
#[cfg(acp_browser)]
mod browser_workspace;
mod cli;
mod cli_shape;
mod consistency;
mod console_credentials;
mod console_links;
mod console_vault;
mod console_workspace;
mod credentials;
mod dashboard;
mod decisions;
mod deploy;
mod egress;
mod email;
mod first_day;
mod first_start;
mod foundation;
mod isolation;
mod jwt;
mod mcp;
mod mcp_gateway;
mod mcp_upstream;
mod metrics;
mod openapi;
mod operator_cli;
mod operators;
mod policies;
mod policy_cli;
mod policy_round_trip;
mod rate_limits;
mod replicas;
mod reputation;
mod signing;
mod signup;
mod sinks;
mod spec_limits;
mod streams;
mod telemetry;
mod vault;
mod vault_agent;
mod vault_cli;
mod vault_proxy;
mod verify;
#[cfg(acp_browser)]
mod webdriver;
