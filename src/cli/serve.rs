//! `acp serve`: the HTTP server.

use std::path::PathBuf;

use crate::app::{shutdown_signal, App, OwnerLater};
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
        Ok(self
            .settings
            .clone()
            .over_file(self.config.as_deref())?
            .resolve()?)
    }
}

/// Log lines queued for the log thread at most; a request that finds the queue full waits
/// for room (lines are never dropped).
const LOG_QUEUE_LINES: usize = 64 * 1024;

/// The server's log: formatted where it happens, written to stderr by a thread of its own
/// through a buffer flushed whenever the queue runs empty, so that a request never waits on a
/// `write` and a busy server writes many lines per system call. The guard flushes what is
/// queued when `serve` returns.
fn init_logging(format: LogFormat) -> tracing_appender::non_blocking::WorkerGuard {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ACP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let colours = super::output::colours_on(&std::io::stderr());
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .buffered_lines_limit(LOG_QUEUE_LINES)
        .thread_name("acp-log")
        .finish(std::io::BufWriter::with_capacity(
            64 * 1024,
            std::io::stderr(),
        ));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(LogWriter(writer))
        .with_ansi(colours);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
    guard
}

/// The log thread's queue as the log's writer. Once the log thread has stopped (its guard is
/// dropped when `serve` returns, flushing every queued line), a task still running until the
/// process exits may log: its line is dropped, where the queue's own writer would fail and the
/// subscriber would print its complaint to stderr, which holds nothing but log lines.
struct LogWriter(tracing_appender::non_blocking::NonBlocking);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogLine;

    fn make_writer(&'a self) -> Self::Writer {
        LogLine(self.0.clone())
    }
}

/// One event's line for [`LogWriter`].
struct LogLine(tracing_appender::non_blocking::NonBlocking);

impl std::io::Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The queue refuses a line only when the log thread has stopped.
        Ok(self.0.write(buf).unwrap_or(buf.len()))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.0.flush();
        Ok(())
    }
}

pub async fn run(args: &ServeArgs) -> anyhow::Result<i32> {
    let config = args.resolve()?;
    let _log = init_logging(config.log_format);
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
            "More keys: acp admin api-key create --workspace {} [--live] {database}",
            boot.workspace_id
        ))?;
        line(format!(
            "More workspaces: acp admin workspace create NAME [--owner you@example.com] {database}"
        ))?;
        match &boot.owner {
            Some(owner) => {
                line(format!(
                    "Owner: {}. Their one-time login link (works once, for 15 minutes):",
                    owner.email
                ))?;
                line("")?;
                if let Some(link) = &owner.login_link {
                    line(format!("    {}", link.expose()))?;
                }
                line("")?;
                if let Some(err) = &owner.mail_error {
                    line(format!("(It could not be mailed: {err})"))?;
                }
                line(format!(
                    "Log in from a terminal in this folder: acp login --server {base} --email {} --outbox",
                    owner.email
                ))?;
            }
            None => line(format!(
                "Dashboard: acp admin add-member --workspace {} --email you@example.com --role owner {database}, then open {base}/login (or start the first time with --owner you@example.com)",
                boot.workspace_id
            ))?,
        }
    } else {
        line(format!(
            "Get an API key with: acp admin workspace create NAME {database}, then acp admin api-key create --workspace ws_... {database}"
        ))?;
    }
    if let (Some(later), Some(email)) = (&app.owner_later, &app.context().config.owner) {
        match later {
            OwnerLater::Member { workspace_id, role } => line(format!(
                "{email} is {} of the default workspace {workspace_id}: log in with `acp login --server {base} --email {email}`.",
                role.as_str()
            ))?,
            // Not added: `--owner` acts on the first start only, so that someone removed
            // from the workspace is never added back by a restart that still names them.
            OwnerLater::NotMember { workspace_id } => line(format!(
                "{email} is not a member of the default workspace {workspace_id}, and --owner acts only on the first start of an empty database. Add them with: acp admin add-member --workspace {workspace_id} --email {email} --role owner {database}"
            ))?,
            OwnerLater::NoDefault => line(format!(
                "--owner acts only on the first start of an empty database; this one has no default workspace. Add {email} with: acp admin add-member --workspace ws_... --email {email} --role owner {database}"
            ))?,
        }
    }
    if app.context().mailer.provider() == "outbox" {
        line(format!(
            "Mail (login links) goes to the outbox: read it with `acp admin outbox list {database}`."
        ))?;
    }
    line(format!(
        "acp listening on {base}  (OpenAPI: {base}/openapi.json, ready: {base}/readyz)"
    ))?;
    app.run(stop).await?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use tracing_subscriber::fmt::MakeWriter as _;

    use super::*;

    /// A sink the log thread writes into, shared with the test.
    #[derive(Clone, Default)]
    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_after_the_log_thread_stopped_is_dropped_without_an_error() {
        let sink = Sink::default();
        let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
            .lossy(false)
            .finish(sink.clone());
        let log = LogWriter(writer);
        log.make_writer().write_all(b"before\n").unwrap();
        drop(guard);
        assert_eq!(sink.0.lock().unwrap().as_slice(), b"before\n");
        // The queue's own writer fails now; the log's drops the line.
        assert!(log.0.clone().write_all(b"after\n").is_err());
        log.make_writer().write_all(b"after\n").unwrap();
        log.make_writer().flush().unwrap();
        assert_eq!(sink.0.lock().unwrap().as_slice(), b"before\n");
    }
}
