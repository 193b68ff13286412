//! The `acp` command line: the server and the admin tools, one file per command. Each command
//! takes only its own flags: the server's settings belong to `serve`, the admin commands take
//! the database (and the settings file), `sync` and `healthcheck` the server they talk to.
//!
//! The client commands (`login`, `whoami`, `token`, `agents`, `audit`, `kill-switch`,
//! `credentials`, `challenges`, `policy get|versions|diff|rollback`, `api-keys`, `members`,
//! `workspaces`, `vault` but for `vault rewrap`, `sync`) talk to a running server with a person's token (`acp login` stores one
//! per server) or a workspace API key; see `client.rs`.
//!
//! Exit codes: 0 success; 1 any error (bad flags included); `sync` and `policy rollback
//! --dry-run` add 2 (a dry run found changes); 3 conflict; the client commands add 4 (not
//! logged in, or the credential is not valid), 5 (refused by role or scope) and 6 (not found).

mod api_key;
mod audit;
mod backup;
mod client;
mod credentials;
mod healthcheck;
mod keys;
mod login;
mod manage;
mod operate;
mod outbox;
pub mod output;
mod policy;
mod policy_remote;
mod serve;
mod sinks;
mod sync;
mod vault;
mod vault_remote;
mod workspace;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{CommandFactory, Parser, Subcommand};

use crate::config::{Config, Settings};
use crate::store::SqlStore;

#[derive(Debug, Parser)]
#[command(
    name = "acp",
    version,
    about = "Agent control plane: identity, signed requests, decisions and audit for agent fleets",
    after_help = "Exit codes: 0 success, 1 error, 2 a dry run found changes (`sync`, `policy rollback`), 3 conflict, 4 not logged in or the credential is not valid, 5 refused by role or scope, 6 not found.\nEvery flag has an ACP_ environment twin where shown (`--database-url` is ACP_DATABASE_URL, `--server` ACP_SERVER, `--token` ACP_TOKEN)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server; the first start creates the database and the default workspace
    Serve(Box<serve::ServeArgs>),
    /// Manage workspaces (in an existing database)
    Workspace(workspace::WorkspaceArgs),
    /// Manage workspace API keys (in an existing database)
    #[command(name = "api-key")]
    ApiKey(api_key::ApiKeyArgs),
    /// Read the mail stored by the `outbox` email provider
    Outbox(outbox::OutboxArgs),
    /// Check that a running server is ready (exit 0) or not (exit 1)
    Healthcheck(healthcheck::HealthcheckArgs),
    /// Print the OpenAPI document of this build
    Openapi,
    /// Policy specs: validate, format, compile and test them offline; get, list, diff and roll
    /// back the versions on a server
    #[command(subcommand)]
    Policy(PolicyCli),
    /// Sync a policy spec to a server: dry run (default) or apply, for CI pipelines
    Sync(sync::SyncArgs),
    /// Manage the JWT issuer's signing keys
    Keys(keys::KeysArgs),
    /// The vault on a server: secret sets, versions, grants, workflow leases; and re-wrapping
    /// the data keys after a master-key rotation (on the database)
    Vault(vault::VaultArgs),
    /// Write a consistent copy of the SQLite database while the servers run
    Backup(backup::BackupArgs),
    /// Put a backup in place of the SQLite database (the servers stopped)
    Restore(backup::RestoreArgs),
    /// Log in to a server from this terminal (magic link) and store a token for it
    Login(login::LoginArgs),
    /// Revoke and forget the stored login of a server
    Logout(login::LogoutArgs),
    /// Who the stored login (or --token) is, and their workspaces
    Whoami(login::WhoamiArgs),
    /// Your personal access tokens: create (e.g. for CI), list, revoke
    Token(login::TokenArgs),
    /// The workspace's agents: list, show, suspend, resume, revoke, approve
    Agents(operate::AgentsArgs),
    /// The audit trail: search it, or tail it (--follow for new events)
    Audit(audit::AuditArgs),
    /// The kill switch: status, pause or resume minting, revoke every credential
    #[command(name = "kill-switch")]
    KillSwitch(operate::KillSwitchArgs),
    /// Credentials: revoke one, revoke an agent's, introspect one
    Credentials(operate::CredentialsArgs),
    /// Policy challenges: list them, approve or deny one
    Challenges(operate::ChallengesArgs),
    /// The workspace's API keys on a server: list, create, revoke
    #[command(name = "api-keys")]
    ApiKeys(manage::ApiKeysArgs),
    /// The workspace's members on a server: list, add, remove
    Members(manage::MembersArgs),
    /// Your workspaces on a server: list, create, use
    Workspaces(manage::WorkspacesArgs),
}

/// `acp policy`: the offline commands and those on a server.
#[derive(Debug, Subcommand)]
pub enum PolicyCli {
    #[command(flatten)]
    Offline(policy::PolicyCommand),
    /// Print a policy on a server: its spec, hash and version (or --cedar)
    Get(policy_remote::PolicyGetArgs),
    /// The versions of a policy on a server, newest first
    Versions(policy_remote::PolicyVersionsArgs),
    /// What changed between two versions of a policy on a server
    Diff(policy_remote::PolicyDiffArgs),
    /// Apply an earlier version's spec as the policy's new version (dry run, conflict and
    /// idempotency as in sync)
    Rollback(policy_remote::PolicyRollbackArgs),
}

/// The database of an admin command. Unlike `serve`, these never create a database: a URL
/// that names none is an error naming the URL.
#[derive(Debug, Clone, clap::Args)]
pub struct DatabaseArgs {
    /// The server's database: `sqlite:PATH` or `postgres://...` [default: sqlite:./data/acp.db]
    #[arg(long, env = "ACP_DATABASE_URL", global = true)]
    pub database_url: Option<String>,
    /// The server's TOML settings file (its `database_url` applies when the flag and
    /// ACP_DATABASE_URL are not set)
    #[arg(long, env = "ACP_CONFIG", global = true)]
    pub config: Option<PathBuf>,
}

impl DatabaseArgs {
    /// The configuration: `more` and the database URL over the settings file, then defaults.
    pub fn resolve(&self, more: Settings) -> anyhow::Result<Config> {
        let file = match &self.config {
            Some(path) => Settings::from_file(path).map_err(anyhow::Error::msg)?,
            None => Settings::default(),
        };
        Settings {
            database_url: self.database_url.clone(),
            ..more
        }
        .over(file)
        .resolve()
        .map_err(anyhow::Error::msg)
    }

    /// Opens the existing database of `config`.
    pub async fn open(config: &Config) -> anyhow::Result<Arc<SqlStore>> {
        crate::app::open_existing_store(config).await
    }
}

/// `ACP_` variables read by something other than a flag: the log filter, the examples and
/// scripts, the test suite and the benchmarks (`ACP_TEST_*`, `ACP_BENCH_*`).
const OTHER_ENV: &[&str] = &[
    "ACP_LOG",
    "ACP_URL",
    "ACP_API_KEY",
    "ACP_BIN",
    "ACP_CHROMEDRIVER",
    "ACP_CHROMIUM",
];
const OTHER_ENV_PREFIXES: &[&str] = &["ACP_TEST_", "ACP_BENCH_"];

/// Every `ACP_` variable this version reads: the env twin of every flag of every command, and
/// the others above.
pub fn known_env() -> BTreeSet<String> {
    fn walk(cmd: &clap::Command, out: &mut BTreeSet<String>) {
        for arg in cmd.get_arguments() {
            if let Some(name) = arg.get_env() {
                out.insert(name.to_string_lossy().into_owned());
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out: BTreeSet<String> = OTHER_ENV.iter().map(|s| (*s).to_owned()).collect();
    walk(&Cli::command(), &mut out);
    out
}

/// `ACP_` variables that are set but mean nothing to this version (typos, mostly).
pub fn unknown_env_vars() -> Vec<String> {
    let known = known_env();
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| {
            k.starts_with("ACP_")
                && !known.contains(k)
                && !OTHER_ENV_PREFIXES.iter().any(|p| k.starts_with(p))
        })
        .collect()
}

/// Runs the parsed command; answers the process exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    match &cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Workspace(args) => workspace::run(args).await,
        Command::ApiKey(args) => api_key::run(args).await,
        Command::Outbox(args) => outbox::run(args).await,
        Command::Healthcheck(args) => healthcheck::run(args).await,
        Command::Openapi => {
            output::print(&crate::http::openapi_document())?;
            Ok(0)
        }
        Command::Policy(PolicyCli::Offline(cmd)) => policy::run(cmd),
        Command::Policy(PolicyCli::Get(args)) => policy_remote::get(args).await,
        Command::Policy(PolicyCli::Versions(args)) => policy_remote::versions(args).await,
        Command::Policy(PolicyCli::Diff(args)) => policy_remote::diff_versions(args).await,
        Command::Policy(PolicyCli::Rollback(args)) => policy_remote::rollback(args).await,
        Command::Sync(args) => sync::run(args).await,
        Command::Keys(args) => keys::run(args).await,
        Command::Vault(args) => vault::run(args).await,
        Command::Backup(args) => backup::backup(args).await,
        Command::Restore(args) => backup::restore(args).await,
        Command::Login(args) => login::login(args).await,
        Command::Logout(args) => login::logout(args).await,
        Command::Whoami(args) => login::whoami(args).await,
        Command::Token(args) => login::token(args).await,
        Command::Agents(args) => operate::agents(args).await,
        Command::Audit(args) => audit::run(args).await,
        Command::KillSwitch(args) => operate::kill_switch(args).await,
        Command::Credentials(args) => operate::credentials(args).await,
        Command::Challenges(args) => operate::challenges(args).await,
        Command::ApiKeys(args) => manage::api_keys(args).await,
        Command::Members(args) => manage::members(args).await,
        Command::Workspaces(args) => manage::workspaces(args).await,
    }
}

/// Parses the command line. Help and version print and exit 0; a bad command line prints the
/// parser's message and exits 1 (not clap's 2, which `acp sync` uses for "changes found").
pub fn parse() -> Result<Cli, i32> {
    match Cli::try_parse() {
        Ok(cli) => Ok(cli),
        Err(err) => {
            let code = if err.use_stderr() { 1 } else { 0 };
            // A closed pipe (`acp --help | head -1`) is no reason to fail.
            let _ = err.print();
            Err(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_variables_of_the_docs_and_of_sync_are_known() {
        let known = known_env();
        for name in [
            "ACP_API_KEY",
            "ACP_URL",
            "ACP_SERVER",
            "ACP_TOKEN",
            "ACP_WORKSPACE",
            "ACP_CREDENTIALS",
            "ACP_DATABASE_URL",
            "ACP_MASTER_KEY",
            "ACP_CONFIG",
            "ACP_LOG",
        ] {
            assert!(known.contains(name), "{name}");
        }
        assert!(!known.contains("ACP_DATABASE_UR"));
    }
}
