//! `acp policy starter`: prints the starter policy, built into the binary (the file
//! `policies/starter.yaml` of the repository), so that a first policy needs no checkout and no
//! writing: `acp policy starter > starter.yaml`, or straight to a server with
//! `acp policy starter | acp sync - --apply`. Every agent of the workspace matches it, without
//! labels or metadata.

use super::output::print;

/// The starter policy spec.
pub const STARTER: &str = include_str!("../../policies/starter.yaml");

pub fn run() -> anyhow::Result<i32> {
    print(STARTER)?;
    Ok(0)
}
