//! Telemetry: agent heartbeats (signed by the agent, or ingested by a pipeline), the
//! workspace's agent inventory, and provider feedback with the reputation it makes.

pub mod error;
pub mod feedback;
pub mod heartbeats;
pub mod inventory;

pub use error::{TelemetryError, TelemetryResult};
