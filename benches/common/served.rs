//! An acp server in process for the benches that call an upstream of their own (the vault's
//! proxy, the MCP gateway): on a temporary SQLite file (or the empty Postgres database named by
//! `ACP_BENCH_DATABASE_URL`), trusting the upstream's CA and allowing loopback through the
//! operator allow-list, as an operator would configure it; and the percentiles they report
//! their pairs of calls with.

use anyhow::{Context as _, Result};

use acp::context::SharedContext;

const MASTER_KEY: &str = "9pt6wChGrj9fIlNeGz7qy3cv4caw0MidFMP3XvbV9KU=";

pub struct Served {
    pub ctx: SharedContext,
    pub workspace_id: String,
    /// The bootstrap API key.
    pub api_key: String,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub database_url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Served {
    /// Starts the server; `ca_pem` is the upstream's CA.
    pub async fn start(ca_pem: &str) -> Result<Served> {
        let dir = tempfile::tempdir()?;
        let database_url = std::env::var("ACP_BENCH_DATABASE_URL")
            .unwrap_or_else(|_| format!("sqlite:{}/acp.db", dir.path().display()));
        let mut config =
            acp::config::Config::for_database(&database_url).map_err(anyhow::Error::msg)?;
        config.addr = "127.0.0.1:0".parse()?;
        config.email_url = "outbox".into();
        config.master_key = Some(acp::secret::Secret::new(MASTER_KEY.to_owned()));
        config.vault_proxy_allow = vec!["127.0.0.1/32".parse()?];
        config.vault_proxy_ca_pem = Some(ca_pem.as_bytes().to_vec());
        let app = acp::app::App::build(config).await?;
        let ctx = app.context().clone();
        let bootstrap = app.bootstrap.as_ref().context("a fresh database")?;
        let workspace_id = bootstrap.workspace_id.clone();
        let api_key = bootstrap
            .generated_key
            .as_ref()
            .context("generated key")?
            .expose()
            .to_owned();
        let base = format!("http://{}", app.local_addr());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(app.run(async move {
            let _ = stopped.await;
        }));
        Ok(Served {
            ctx,
            workspace_id,
            api_key,
            base,
            database_url,
            stop,
            server,
            _dir: dir,
        })
    }

    /// The engine, as the results name it.
    pub fn engine(&self) -> &'static str {
        if self.database_url.starts_with("postgres") {
            "Postgres"
        } else {
            "SQLite (synchronous=FULL)"
        }
    }

    /// A graceful stop.
    pub async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        self.server.await?
    }
}

/// The `p`th percentile of sorted values (nearest rank).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}
