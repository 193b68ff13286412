//! Telemetry: agent heartbeats (signed by the agent, or ingested by a pipeline) and the
//! workspace's agent inventory.

pub mod heartbeats;
pub mod inventory;
pub mod reputation;
