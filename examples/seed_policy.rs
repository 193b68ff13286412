//! Installs the large spec of `scripts/seed-large.sh` into a seeded database: 10,000 groups of
//! 10 seeded agents each (100,000 members: agents 11 to 100,010), one binding per group over 10
//! blocks (actions and amounts; no email rules, which would take 10,000 bindings over the spec's
//! 200,000 rules), as the next version of the default policy of the workspace named. Its text (about
//! 4 MB as JSON) is over the 1 MiB a sync takes, so it is written straight into the database as
//! a sync would write it (version, Cedar, members, bindings); a running server picks it up as it
//! would another replica's apply.
//!
//!   cargo run --profile quick --example seed_policy -- DATABASE_URL WORKSPACE_ID [GROUPS]
//!
//! DATABASE_URL is `sqlite:PATH` or `postgres://...` (the seed script passes the workspace it
//! seeded); GROUPS defaults to 10,000 (at most the 10,000 the spec limits allow, and at most a
//! tenth of the seeded agents). Prints the compile's
//! duration.

use anyhow::{bail, Context as _};

#[path = "../benches/common/mod.rs"]
mod common;

/// The id of seeded agent `n` (1-based), as `scripts/seed-large.sh` writes it.
fn seeded_agent(n: usize) -> String {
    format!("agt_5eed{n:028x}")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, workspace_id, ..] = args.as_slice() else {
        bail!("usage: seed_policy DATABASE_URL WORKSPACE_ID [GROUPS]");
    };
    let groups: usize = match args.get(2) {
        Some(n) => n.parse().context("GROUPS must be a whole number")?,
        None => 10_000,
    };
    if groups == 0 || groups > acp::policy::limits::MAX_GROUPS {
        bail!(
            "GROUPS must be between 1 and {}",
            acp::policy::limits::MAX_GROUPS
        );
    }
    // Agents 1 to 10 are the seed's rare ones: members start after them.
    let spec = common::sized_spec_of(groups, false, |n| seeded_agent(n + 11));
    let members: usize = spec.agent_groups.iter().map(|g| g.members.len()).sum();
    let (version, compiled_in) = common::install_policy(url, workspace_id, &spec).await?;
    println!(
        "installed version {version} of pol_default in {}: {groups} groups, {members} members, {} bindings; compiled in {:.2} s",
        workspace_id,
        spec.bindings.len(),
        compiled_in.as_secs_f64()
    );
    Ok(())
}
