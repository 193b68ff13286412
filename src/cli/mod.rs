//! The `acp` command line: the server, the client commands and the admin tools, one file per
//! command. Each command takes only its own flags: the server's settings belong to `serve`, the
//! admin commands (`acp admin ...`) take the database (and the settings file), the client
//! commands the server they talk to.
//!
//! The client commands (`login`, `whoami`, `token`, `agents`, `audit`, `kill-switch`,
//! `credentials`, `challenges`, `policy get|versions|diff|rollback`, `api-keys`, `members`,
//! `workspaces`, `vault`, `mcp`, `sync`) talk to a running server with a person's token (`acp login` stores one
//! per server) or a workspace API key; see `client.rs`. Their shared flags are listed once, by
//! `acp options`, and hidden from each command's help.
//!
//! `acp --help` lists the commands in groups ([`GROUPS`]) and the exit codes ([`EXIT_CODES`]),
//! one table for every command. clap has no command groups: the help's text is built from the
//! command tree, so a command missing from [`GROUPS`] shows up under "Other commands" (and a test
//! fails).

mod access;
mod admin;
mod agent_side;
mod api_key;
mod audit;
mod backup;
mod check;
mod client;
mod credentials;
mod healthcheck;
mod keys;
mod login;
mod manage;
mod mcp;
mod operate;
mod outbox;
pub mod output;
mod policy;
mod policy_remote;
mod resolve;
mod serve;
mod sinks;
mod starter;
mod sync;
mod values;
mod vault;
mod vault_remote;
mod workspace;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args as _, CommandFactory, FromArgMatches as _, Parser, Subcommand};

use crate::config::{Config, Settings};
use crate::store::SqlStore;

/// The exit codes of every command.
pub const EXIT_CODES: &[(i32, &str)] = &[
    (0, "success (`acp check`: allow)"),
    (
        1,
        "error: bad flags or input, the server unreachable, a server error, a confirmation declined",
    ),
    (
        2,
        "a dry run found changes (`sync`, `policy rollback --dry-run`)",
    ),
    (
        3,
        "conflict: already decided or used, not at the expected hash",
    ),
    (4, "not logged in, or the credential is not valid"),
    (5, "refused by role or scope"),
    (6, "not found"),
    (7, "a `--fail-on-impact` / `--fail-on` gate of `sync` tripped"),
    (8, "`acp check` answered deny"),
    (9, "`acp check` answered challenge"),
];

/// The groups of `acp --help`, in order, with the commands of each.
pub const GROUPS: &[(&str, &[&str])] = &[
    ("Start the server", &["serve", "healthcheck", "openapi"]),
    ("Log in", &["login", "logout", "whoami", "token"]),
    ("Agents and decisions", &["agents", "check"]),
    ("Policies", &["policy", "sync", "access"]),
    ("Approvals and audit", &["challenges", "audit"]),
    (
        "Credentials, vault and MCP",
        &["credentials", "kill-switch", "vault", "mcp"],
    ),
    (
        "Workspace and access",
        &["workspaces", "members", "api-keys"],
    ),
    ("Admin (local database)", &["admin"]),
    ("Help", &["options", "help"]),
];

/// The line each client command's help ends with, instead of the shared flags themselves.
const CLIENT_OPTIONS_NOTE: &str =
    "Server and output options (--server, --token, --workspace, --credentials, --output): see `acp options`.";

#[derive(Debug, Parser)]
#[command(
    name = "acp",
    version,
    about = "Agent control plane: identity, signed requests, decisions and audit for agent fleets"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server; the first start creates the database and the default workspace
    Serve(Box<serve::ServeArgs>),
    /// Check that a running server is ready (exit 0) or not (exit 1)
    Healthcheck(healthcheck::HealthcheckArgs),
    /// Print the OpenAPI document of this build
    Openapi,
    /// Log in to a server from this terminal (magic link) and store a token for it
    Login(login::LoginArgs),
    /// Revoke and forget the stored login of a server
    Logout(login::LogoutArgs),
    /// Who the stored login (or --token) is, and their workspaces
    Whoami(login::WhoamiArgs),
    /// Your personal access tokens: create (e.g. for CI), list, revoke
    Token(login::TokenArgs),
    /// The workspace's agents: list, show, suspend, resume, revoke, approve; new (a key pair,
    /// registered and attested) and heartbeat (signed with its key file)
    Agents(agent_side::AgentsArgs),
    /// Ask the server whether an agent may do an action (exit 0 allow, 8 deny, 9 challenge)
    Check(check::CheckArgs),
    /// Policy specs: validate, format, compile and test them offline; get, list, diff and roll
    /// back the versions on a server
    #[command(subcommand)]
    Policy(PolicyCli),
    /// Sync a policy spec to a server: dry run (default) or apply, for CI pipelines
    Sync(sync::SyncArgs),
    /// Who may do what under a policy: what an agent can do, who can do an action
    Access(access::AccessArgs),
    /// Policy challenges: list them, show one, approve or deny one
    Challenges(operate::ChallengesArgs),
    /// The audit trail: search it, or tail it (--follow for new events); sinks and retention
    Audit(audit::AuditArgs),
    /// Credentials: revoke one, revoke an agent's, introspect one
    Credentials(operate::CredentialsArgs),
    /// The kill switch: status, pause or resume minting, revoke every credential
    #[command(name = "kill-switch")]
    KillSwitch(operate::KillSwitchArgs),
    /// The vault on a server: secret sets, versions, grants, workflow leases
    Vault(vault::VaultArgs),
    /// The MCP gateway on a server: the servers agents reach through it
    Mcp(mcp::McpArgs),
    /// Your workspaces on a server: list, create, use
    Workspaces(manage::WorkspacesArgs),
    /// The workspace's members on a server: list, add, remove
    Members(manage::MembersArgs),
    /// The workspace's API keys on a server: list, create, revoke
    #[command(name = "api-keys")]
    ApiKeys(manage::ApiKeysArgs),
    /// Work on the server's database directly: workspaces, members, API keys, the outbox,
    /// signing keys, vault keys, backup and restore
    Admin(admin::AdminArgs),
    /// The options every command that talks to a server takes
    Options,

    // The spellings of the admin commands before `acp admin`: they still work for one release,
    // hidden from the help, with a note naming the new spelling.
    #[command(hide = true)]
    Workspace(workspace::WorkspaceArgs),
    #[command(name = "api-key", hide = true)]
    ApiKey(api_key::ApiKeyArgs),
    #[command(hide = true)]
    Outbox(outbox::OutboxArgs),
    #[command(hide = true)]
    Keys(keys::KeysArgs),
    #[command(hide = true)]
    Backup(backup::BackupArgs),
    #[command(hide = true)]
    Restore(backup::RestoreArgs),
}

/// `acp policy`: the offline commands and those on a server.
#[derive(Debug, Subcommand)]
pub enum PolicyCli {
    #[command(flatten)]
    Offline(policy::PolicyCommand),
    /// Print the starter policy (every agent matches it): save it, or pipe it to `acp sync -`
    Starter,
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
        Ok(Settings {
            database_url: self.database_url.clone(),
            ..more
        }
        .over_file(self.config.as_deref())?
        .resolve()?)
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

/// Prints the one-line note of a deprecated spelling: `old` still works, `new` is the way.
fn deprecated(old: &str, new: &str) {
    let _ = output::eline(format!(
        "warning: `acp {old}` is deprecated and goes in the next release: use `acp {new}`"
    ));
}

/// Runs the parsed command; answers the process exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    match &cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Healthcheck(args) => healthcheck::run(args).await,
        Command::Openapi => {
            output::print(&crate::http::openapi_document())?;
            Ok(0)
        }
        Command::Policy(PolicyCli::Offline(cmd)) => policy::run(cmd),
        Command::Policy(PolicyCli::Starter) => starter::run(),
        Command::Policy(PolicyCli::Get(args)) => policy_remote::get(args).await,
        Command::Policy(PolicyCli::Versions(args)) => policy_remote::versions(args).await,
        Command::Policy(PolicyCli::Diff(args)) => policy_remote::diff_versions(args).await,
        Command::Policy(PolicyCli::Rollback(args)) => policy_remote::rollback(args).await,
        Command::Sync(args) => sync::run(args).await,
        Command::Login(args) => login::login(args).await,
        Command::Logout(args) => login::logout(args).await,
        Command::Whoami(args) => login::whoami(args).await,
        Command::Token(args) => login::token(args).await,
        Command::Agents(args) => agent_side::agents(args).await,
        Command::Check(args) => check::run(args).await,
        Command::Access(args) => access::run(args).await,
        Command::Audit(args) => audit::run(args).await,
        Command::KillSwitch(args) => operate::kill_switch(args).await,
        Command::Credentials(args) => operate::credentials(args).await,
        Command::Challenges(args) => operate::challenges(args).await,
        Command::ApiKeys(args) => manage::api_keys(args).await,
        Command::Members(args) => manage::members(args).await,
        Command::Mcp(args) => mcp::run(args).await,
        Command::Workspaces(args) => manage::workspaces(args).await,
        Command::Admin(args) => admin::run(args).await,
        Command::Options => {
            output::print(&options_text())?;
            Ok(0)
        }
        Command::Workspace(args) => {
            let sub = args.command.name();
            let new = if sub == "add-member" {
                "admin add-member".to_owned()
            } else {
                format!("admin workspace {sub}")
            };
            deprecated(&format!("workspace {sub}"), &new);
            workspace::run(args).await
        }
        Command::ApiKey(args) => {
            deprecated("api-key create", "admin api-key create");
            api_key::run(args).await
        }
        Command::Outbox(args) => {
            deprecated("outbox list", "admin outbox list");
            outbox::run(args).await
        }
        Command::Keys(args) => {
            let sub = args.command.name();
            deprecated(&format!("keys {sub}"), &format!("admin keys {sub}"));
            keys::run(args).await
        }
        Command::Vault(args) => vault::run(args).await,
        Command::Backup(args) => {
            deprecated("backup", "admin backup");
            backup::backup(args).await
        }
        Command::Restore(args) => {
            deprecated("restore", "admin restore");
            backup::restore(args).await
        }
    }
}

/// The command tree with its generated help: the groups and exit codes of `acp --help`, and the
/// pointer to `acp options` in the help of every command that takes the client flags.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    // Built first, so that the `help` subcommand is there to be grouped.
    cmd.build();
    let groups = groups_text(&cmd);
    let codes = exit_codes_text(&cmd);
    let options = heading(&cmd, "Options");
    cmd.help_template(format!(
        "{{before-help}}{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{groups}\n\n{options}\n{{options}}\n\n{codes}{{after-help}}"
    ))
    .after_help(
        "Every flag has an ACP_ environment twin where shown (`--database-url` is ACP_DATABASE_URL, `--server` ACP_SERVER, `--token` ACP_TOKEN).",
    )
    .mut_subcommands(|sub| with_client_note(sub, false))
}

/// A help heading in the command's style.
fn heading(cmd: &clap::Command, text: &str) -> String {
    let style = cmd.get_styles().get_header();
    format!("{style}{text}:{style:#}")
}

/// The visible subcommands of `cmd` under the headings of [`GROUPS`]; any other under "Other
/// commands".
fn groups_text(cmd: &clap::Command) -> String {
    let visible: Vec<(String, String)> = cmd
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| {
            let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
            (c.get_name().to_owned(), about)
        })
        .collect();
    let width = visible.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let literal = cmd.get_styles().get_literal();
    let row = |name: &str, about: &str| {
        let pad = " ".repeat(width - name.len());
        format!("  {literal}{name}{literal:#}{pad}  {about}\n")
    };
    let mut out = String::new();
    for (title, names) in GROUPS {
        let rows: String = visible
            .iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .map(|(n, a)| row(n, a))
            .collect();
        if !rows.is_empty() {
            out.push_str(&format!("{}\n{rows}\n", heading(cmd, title)));
        }
    }
    let others: String = visible
        .iter()
        .filter(|(n, _)| !GROUPS.iter().any(|(_, names)| names.contains(&n.as_str())))
        .map(|(n, a)| row(n, a))
        .collect();
    if !others.is_empty() {
        out.push_str(&format!("{}\n{others}\n", heading(cmd, "Other commands")));
    }
    out.trim_end().to_owned()
}

/// [`EXIT_CODES`] as a help section.
fn exit_codes_text(cmd: &clap::Command) -> String {
    let mut out = heading(cmd, "Exit codes (every command)");
    for (code, meaning) in EXIT_CODES {
        out.push_str(&format!("\n  {code}  {meaning}"));
    }
    out
}

/// `cmd` with the pointer to `acp options` after its help when it (or a command above it) takes
/// the client flags; the same for its subcommands.
fn with_client_note(cmd: clap::Command, inherited: bool) -> clap::Command {
    let client = inherited || cmd.get_arguments().any(|a| a.get_id() == "server");
    let cmd = if client {
        let note = match cmd.get_after_help() {
            Some(help) => format!("{help}\n{CLIENT_OPTIONS_NOTE}"),
            None => CLIENT_OPTIONS_NOTE.to_owned(),
        };
        cmd.after_help(note)
    } else {
        cmd
    };
    cmd.mut_subcommands(|sub| with_client_note(sub, client))
}

/// What `acp options` prints: the client flags, from their definitions.
pub fn options_text() -> String {
    let mut cmd = client::ClientArgs::augment_args(clap::Command::new("acp"))
        .disable_help_flag(true)
        .mut_args(|a| a.hide(false).global(false))
        .help_template("{options}");
    format!(
        "The options of every command that talks to a server, before or after the command \
         (e.g. `acp agents list --output json`). Each has an ACP_ environment variable; without \
         them, the stored login of `acp login` is used.\n\n{}\n",
        cmd.render_help().to_string().trim_end()
    )
}

/// Parses the command line. Help and version print and exit 0; a bad command line prints the
/// parser's message and exits 1 (not clap's 2, which `acp sync` uses for "changes found").
pub fn parse() -> Result<Cli, i32> {
    let parsed = command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches));
    match parsed {
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
        command().debug_assert();
    }

    /// A command's own argument with the id of a global one above it would take the global's
    /// value (a positional `token` would be sent as `--token`).
    #[test]
    fn no_argument_shadows_a_global_one() {
        fn walk(cmd: &clap::Command, globals: &BTreeSet<String>, path: &str) {
            let mut mine = globals.clone();
            for arg in cmd.get_arguments() {
                let id = arg.get_id().to_string();
                assert!(
                    !globals.contains(&id),
                    "`{path}` redefines the global `{id}`"
                );
                if arg.is_global_set() {
                    mine.insert(id);
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &mine, &format!("{path} {}", sub.get_name()));
            }
        }
        walk(&Cli::command(), &BTreeSet::new(), "acp");
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
