//! The policy engine of acp: the spec language ([`spec`], read by [`source`] from YAML or JSON
//! with positions, bounded by [`limits`]), its compilation to a strictly validated Cedar policy
//! set with an index of its rules ([`compile`]), the evaluation of a check against it
//! ([`evaluate`]), the differences between two versions ([`diff`], [`semantic`]), the spec's
//! lints ([`lint`]) and layout ([`layout`]), what an approver is told of a challenge
//! ([`challenge`]) and a request evaluated as `acp policy test` evaluates it ([`bench`]).
//!
//! Pure: it reads and decides, and holds no I/O, no runtime, no database, HTTP or mail client.
//! The service (the `acp` crate) keeps the caches, the use cases and the edges above it.
#![forbid(unsafe_code)]

pub mod bench;
pub mod challenge;
pub mod compile;
pub mod diff;
pub mod error;
pub mod evaluate;
pub mod layout;
pub mod limits;
pub mod lint;
mod memo;
pub mod semantic;
pub mod source;
pub mod spec;

pub use compile::{compile, CompiledPolicy};
pub use evaluate::{evaluate, ContextFields, Decision, EmailFacts, Facts};
pub use spec::{Outcome, PolicySpec, SpecError};

#[cfg(test)]
mod tests;
