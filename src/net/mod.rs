//! Outbound HTTP with its SSRF rules: the one way out of the service to an address a user
//! named (the vault's injecting proxy, the audit sinks' receivers). Infrastructure, beside
//! `mail/`: it names nothing of the use cases, so the run-time context can hold it.

pub mod egress;
