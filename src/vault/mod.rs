//! The vault: secret sets sealed at rest, their versions and grants ([`sets`]); workflow and
//! request leases ([`leases`]); the agent's side, signed requests judged by lease, grant and
//! policy ([`agent`]), and what it would decide ([`eval`]); and the injecting proxy
//! ([`proxy`]), whose way out is `net::egress`. Its use cases answer the enforcement error
//! ([`crate::enforce::EnforceError`]).

pub mod agent;
pub mod eval;
pub mod leases;
pub mod proxy;
pub mod sets;
