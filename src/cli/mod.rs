//! The `acp` command line: the server and the admin tools, one file per command.

mod api_key;
mod healthcheck;
mod keys;
mod outbox;
mod policy;
mod serve;
mod sync;
mod workspace;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{Config, Settings};

#[derive(Debug, Parser)]
#[command(
    name = "acp",
    version,
    about = "Agent control plane: identity, signed requests, decisions and audit for agent fleets"
)]
pub struct Cli {
    /// Optional TOML file with settings (lowest precedence after defaults)
    #[arg(long, env = "ACP_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub settings: Settings,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server
    Serve,
    /// Manage workspaces
    #[command(subcommand)]
    Workspace(workspace::WorkspaceCommand),
    /// Manage workspace API keys
    #[command(subcommand, name = "api-key")]
    ApiKey(api_key::ApiKeyCommand),
    /// Read the mail stored by the `outbox` email provider
    #[command(subcommand)]
    Outbox(outbox::OutboxCommand),
    /// Check that a running server is ready (exit 0) or not (exit 1)
    Healthcheck(healthcheck::HealthcheckArgs),
    /// Print the OpenAPI document of this build
    Openapi,
    /// Validate, format, compile and test policy specs (offline: no server, no database)
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Sync a policy spec to a server: dry run (default) or apply, for CI pipelines
    Sync(sync::SyncArgs),
    /// Manage the JWT issuer's signing keys
    #[command(subcommand)]
    Keys(keys::KeysCommand),
}

impl Cli {
    /// Layers flags and environment (already merged by clap) over the optional file.
    pub fn resolve_config(&self) -> anyhow::Result<Config> {
        let file = match &self.config {
            Some(path) => Settings::from_file(path).map_err(anyhow::Error::msg)?,
            None => Settings::default(),
        };
        self.settings
            .clone()
            .over(file)
            .resolve()
            .map_err(anyhow::Error::msg)
    }
}

/// Runs the parsed command; answers the process exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    match &cli.command {
        Command::Serve => serve::run(&cli).await,
        Command::Workspace(cmd) => workspace::run(&cli, cmd).await,
        Command::ApiKey(cmd) => api_key::run(&cli, cmd).await,
        Command::Outbox(cmd) => outbox::run(&cli, cmd).await,
        Command::Healthcheck(args) => healthcheck::run(&cli, args).await,
        Command::Openapi => {
            print!("{}", crate::http::openapi_document());
            Ok(0)
        }
        Command::Policy(cmd) => policy::run(cmd),
        Command::Sync(args) => sync::run(args).await,
        Command::Keys(cmd) => keys::run(&cli, cmd).await,
    }
}
