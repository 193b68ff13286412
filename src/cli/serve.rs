//! `acp serve`: the HTTP server.

use std::path::PathBuf;

use crate::app::{shutdown_signal, App};
use crate::config::{Config, LogFormat, Settings};
use crate::secret::redact_url;

use super::output::line;
use super::unknown_env_vars;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Settings come from the flags, then their ACP_ environment variables, then the --config file, then the defaults."
)]
pub struct ServeArgs {
    /// A TOML file with settings (the flags' names with `_`, e.g. `database_url = "..."`)
    #[arg(long, env = "ACP_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub settings: Settings,
}

impl ServeArgs {
    /// Layers flags and environment (already merged by clap) over the optional file.
    fn resolve(&self) -> anyhow::Result<Config> {
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

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ACP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(super::output::colours_on(&std::io::stderr()));
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}

pub async fn run(args: &ServeArgs) -> anyhow::Result<i32> {
    let config = args.resolve()?;
    init_logging(config.log_format);
    for name in unknown_env_vars() {
        tracing::warn!(variable = %name, "unknown ACP_ environment variable ignored (typo?)");
    }
    tracing::info!(database = %redact_url(&config.database_url), "opening the database");
    let app = App::build(config).await?;
    // Before the address is printed: whoever reads it may send SIGTERM at once.
    let stop = shutdown_signal();
    let prefix = app.context().config.path_prefix.clone().unwrap_or_default();
    let base = format!("http://{}{prefix}", app.local_addr());
    // How the admin commands find this database (never with a password in it).
    let url = &app.context().config.database_url;
    let has_password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .is_some_and(|(credentials, _)| credentials.contains(':'));
    let database = if has_password {
        "--database-url (the server's)".to_owned()
    } else {
        format!("--database-url {url}")
    };
    if let Some(boot) = &app.bootstrap {
        line(format!(
            "Created the default workspace {}.",
            boot.workspace_id
        ))?;
        match &boot.generated_key {
            Some(key) => {
                line("Its API key, shown this once (store it now):")?;
                line("")?;
                // The key's one appearance in the whole output: the example below names it by
                // a variable, and no log line carries it.
                line(format!("    {}", key.expose()))?;
                line("")?;
                line(format!(
                    "Try it:  export ACP_API_KEY=...   (the key above)\n         curl -s -H \"X-Service-Api-Key: $ACP_API_KEY\" {base}/v1/agents"
                ))?;
            }
            None => line("Its API key is the one in ACP_BOOTSTRAP_API_KEY.")?,
        }
        line(format!(
            "More keys: acp api-key create --workspace {} [--live] {database}",
            boot.workspace_id
        ))?;
        line(format!(
            "More workspaces: acp workspace create NAME [--owner you@example.com] {database}"
        ))?;
        line(format!(
            "Dashboard: acp workspace add-member --workspace {} --email you@example.com --role owner {database}, then open {base}/login",
            boot.workspace_id
        ))?;
    } else {
        line(format!(
            "Get an API key with: acp workspace create NAME {database}, then acp api-key create --workspace ws_... {database}"
        ))?;
    }
    if app.context().mailer.provider() == "outbox" {
        line(format!(
            "Mail (login links) goes to the outbox: read it with `acp outbox list {database}`."
        ))?;
    }
    line(format!(
        "acp listening on {base}  (OpenAPI: {base}/openapi.json, ready: {base}/readyz)"
    ))?;
    app.run(stop).await?;
    Ok(0)
}
