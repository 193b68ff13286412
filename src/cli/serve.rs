//! `acp serve`: the HTTP server.

use crate::app::{redact_url, shutdown_signal, App};
use crate::config::{unknown_env_vars, LogFormat};

use super::Cli;

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ACP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn,tower_http=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}

pub async fn run(cli: &Cli) -> anyhow::Result<i32> {
    let config = cli.resolve_config()?;
    init_logging(config.log_format);
    for name in unknown_env_vars() {
        tracing::warn!(variable = %name, "unknown ACP_ environment variable ignored (typo?)");
    }
    tracing::info!(database = %redact_url(&config.database_url), "opening the database");
    let app = App::build(config).await?;
    let prefix = app.context().config.path_prefix.clone().unwrap_or_default();
    let base = format!("http://{}{prefix}", app.local_addr());
    if let Some(boot) = &app.bootstrap {
        println!("Created the default workspace {}.", boot.workspace_id);
        match &boot.generated_key {
            Some(key) => {
                println!("Its API key, shown this once (store it now):");
                println!();
                println!("    {}", key.expose());
                println!();
                println!(
                    "Try it:  curl -s -H 'X-Service-Api-Key: {}' {base}/v1/agents",
                    key.expose()
                );
            }
            None => println!("Its API key is the one in ACP_BOOTSTRAP_API_KEY."),
        }
        println!(
            "More keys: acp api-key create --workspace {} [--live]   (same --database-url as the server)",
            boot.workspace_id
        );
        println!("More workspaces: acp workspace create NAME [--owner you@example.com]");
        println!(
            "Dashboard: acp workspace add-member --workspace {} --email you@example.com --role owner, then open {base}/login",
            boot.workspace_id
        );
    } else {
        println!("Get an API key with: acp workspace create NAME, then acp api-key create --workspace ws_...");
    }
    if app.context().mailer.provider() == "outbox" {
        println!("Mail (login links) goes to the outbox: read it with `acp outbox list`.");
    }
    println!("acp listening on {base}  (OpenAPI: {base}/openapi.json, ready: {base}/readyz)");
    app.run(shutdown_signal()).await?;
    Ok(0)
}
