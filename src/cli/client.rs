//! What every command that talks to a server shares: which server, which credential and which
//! workspace (flags, then `ACP_` variables, then the stored login of `acp login`), the HTTP
//! calls, and the server's refusals turned into exit codes.
//!
//! The exit codes are one table for every command (see `EXIT_CODES` in `mod.rs`): a refusal of
//! the server maps by its status (401 to 4, 403 to 5, 404 to 6, 409 and 410 to 3), anything else
//! that goes wrong is 1. Errors are one line on stderr, `error: MESSAGE (code: CODE)`.
//!
//! A call gives up on a server it cannot connect to within [`CONNECT_TIMEOUT`] and on an
//! answer that takes longer than [`REQUEST_TIMEOUT`] (the event stream of `acp audit tail
//! --follow` has no total limit). A read (`GET`) the server could not take (no connection, or
//! 502, 503, 504 from a proxy in front of it) is tried again up to [`ATTEMPTS`] times in all,
//! waiting [`FIRST_RETRY_DELAY`] and then twice as long each time; a change is sent once.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;

use super::credentials::Credentials;
use super::output::{eline, line};

/// The flags of every client command (global: they go before or after the subcommand). They
/// are hidden from each command's help and listed once by `acp options`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// Base URL of the acp server [default: the server of the last `acp login`]
    #[arg(long, env = "ACP_SERVER", global = true, hide = true)]
    pub server: Option<String>,
    /// A personal access token (`svc_pat_...`) or a workspace API key [default: the stored
    /// login's token for the server]
    #[arg(
        long,
        env = "ACP_TOKEN",
        hide_env_values = true,
        global = true,
        hide = true
    )]
    pub token: Option<String>,
    /// The workspace to act on (`ws_...`) [default: the one of `acp workspaces use`, else your
    /// only one]
    #[arg(long, env = "ACP_WORKSPACE", global = true, hide = true)]
    pub workspace: Option<String>,
    /// The file of stored logins [default: $XDG_CONFIG_HOME/acp/credentials.json, else
    /// ~/.config/acp/credentials.json]
    #[arg(
        long,
        env = "ACP_CREDENTIALS",
        global = true,
        value_name = "PATH",
        hide = true
    )]
    pub credentials: Option<PathBuf>,
    /// `text` (tables) for people, `json` (the server's answer) for tools, `csv` (rows, for
    /// a review export; `acp access` only)
    #[arg(long, value_enum, default_value_t = ServerOutput::Text, global = true, hide = true)]
    pub output: ServerOutput,
}

/// `--yes`, taken only by the commands that ask before a destructive change.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct YesArg {
    /// Do not ask first (needed when stdin is not a terminal)
    #[arg(long, short = 'y')]
    pub yes: bool,
}

impl YesArg {
    /// Asks on a terminal before `what`; without a terminal, only `--yes` goes ahead.
    pub fn confirm(self, what: &str) -> anyhow::Result<()> {
        if self.yes {
            return Ok(());
        }
        if !std::io::stdin().is_terminal() {
            return Err(Failure::local(
                1,
                format!("refusing to {what} without confirmation: pass --yes"),
            )
            .into());
        }
        eprint!("{what}? [y/N] ");
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        if matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            Ok(())
        } else {
            Err(Failure::local(1, "not confirmed; nothing changed").into())
        }
    }
}

/// `--output` of the commands that talk to a server: `text` and `json`'s values, and `csv` where a
/// command has rows to export (the others refuse it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerOutput {
    #[default]
    Text,
    Json,
    Csv,
}

impl ClientArgs {
    pub fn json(&self) -> bool {
        self.output == ServerOutput::Json
    }

    pub fn csv(&self) -> bool {
        self.output == ServerOutput::Csv
    }

    /// [`Self::connect`] for a command that prints `--output csv`.
    pub fn connect_csv(&self) -> anyhow::Result<Client> {
        self.connect_as()
    }

    /// The server, credential and workspace to use, or an error that says how to log in;
    /// `--output csv` is refused (only `acp access` prints rows).
    pub fn connect(&self) -> anyhow::Result<Client> {
        if self.csv() {
            return Err(Failure::local(1, "`--output csv` is for `acp access` only").into());
        }
        self.connect_as()
    }

    pub fn credentials_path(&self) -> anyhow::Result<PathBuf> {
        match &self.credentials {
            Some(p) => Ok(p.clone()),
            None => Credentials::default_path(),
        }
    }

    fn connect_as(&self) -> anyhow::Result<Client> {
        let stored = Credentials::load(&self.credentials_path()?)?;
        let server = match &self.server {
            Some(s) => normalize(s),
            None => stored.current.clone().ok_or_else(|| {
                Failure::local(
                    4,
                    "not logged in: run `acp login --server URL`, or pass --server and --token",
                )
            })?,
        };
        let login = stored.servers.get(&server).cloned();
        let token = match (&self.token, &login) {
            (Some(t), _) => t.clone(),
            (None, Some(l)) => l.token.clone(),
            (None, None) => {
                return Err(Failure::local(
                    4,
                    format!(
                    "not logged in to {server}: run `acp login --server {server}`, or pass --token"
                ),
                )
                .into())
            }
        };
        let workspace = self
            .workspace
            .clone()
            .or_else(|| login.and_then(|l| l.workspace));
        Ok(Client::new(server, token, workspace))
    }
}

/// A server base URL without its trailing slashes.
pub fn normalize(server: &str) -> String {
    server.trim().trim_end_matches('/').to_owned()
}

/// A refusal to report: the server's (status, code, message, body) or one of the command's own.
#[derive(Debug)]
pub struct Failure {
    pub exit: i32,
    pub status: Option<u16>,
    pub code: String,
    pub message: String,
    pub body: Value,
}

impl Failure {
    pub fn local(exit: i32, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            exit,
            status: None,
            code: String::new(),
            body: serde_json::json!({"ok": false, "error": "cli", "message": message}),
            message,
        }
    }

    pub fn from_answer(status: u16, body: Value) -> Self {
        Self {
            exit: exit_for_status(status),
            status: Some(status),
            code: body["error"].as_str().unwrap_or("unknown").to_owned(),
            message: body["message"].as_str().unwrap_or("").to_owned(),
            body,
        }
    }
}

/// The exit code of a refusal with HTTP `status` (see `EXIT_CODES` in `mod.rs`).
pub fn exit_for_status(status: u16) -> i32 {
    match status {
        401 => 4,
        403 => 5,
        404 => 6,
        409 | 410 => 3,
        _ => 1,
    }
}

/// `MESSAGE (code: CODE)`: how every command reports an error of the server (after `error: `).
pub fn error_text(message: &str, code: &str, status: Option<u16>) -> String {
    let message = match (message.trim(), status) {
        ("", Some(status)) => format!("the server answered HTTP {status}"),
        (m, _) => m.to_owned(),
    };
    if code.is_empty() {
        message
    } else {
        format!("{message} (code: {code})")
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&error_text(&self.message, &self.code, self.status))
    }
}

impl std::error::Error for Failure {}

/// Reports what a client command ended with and answers its exit code.
pub fn finish(result: anyhow::Result<i32>, json: bool) -> anyhow::Result<i32> {
    match result {
        Ok(code) => Ok(code),
        Err(err) => match err.downcast_ref::<Failure>() {
            Some(f) => {
                if json {
                    line(&f.body)?;
                } else {
                    // The server's message names a missing role or scope itself.
                    eline(format!("error: {f}"))?;
                }
                Ok(f.exit)
            }
            None => Err(err),
        },
    }
}

/// The longest a command waits for a connection to the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a command waits for one whole answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How many times in all a read is tried while the server cannot take it.
pub const ATTEMPTS: u32 = 3;
/// The wait before the second try of a read (doubled before each further one).
pub const FIRST_RETRY_DELAY: Duration = Duration::from_millis(250);

/// An acp server as one credential sees it.
pub struct Client {
    http: reqwest::Client,
    pub server: String,
    token: String,
    pub workspace: Option<String>,
}

impl Client {
    pub fn new(server: String, token: String, workspace: Option<String>) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .unwrap_or_default();
        Self {
            http,
            server,
            token,
            workspace,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server)
    }

    /// A request with the credential and the workspace.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, self.url(path));
        req = if self.token.starts_with("svc_live_") || self.token.starts_with("svc_test_") {
            req.header("X-Service-Api-Key", &self.token)
        } else {
            req.bearer_auth(&self.token)
        };
        if let Some(ws) = &self.workspace {
            req = req.header("X-Service-Workspace", ws);
        }
        req
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.send(self.request(reqwest::Method::GET, path)).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.send(self.request(reqwest::Method::POST, path).json(body))
            .await
    }

    /// Sends `req` within [`REQUEST_TIMEOUT`]; a 2xx answer's JSON, else the server's refusal
    /// as a [`Failure`]. A read is tried again while the server cannot take it (see the module's
    /// documentation); a change is sent once.
    pub async fn send(&self, req: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let unreachable = || format!("cannot reach the acp server at {}", self.server);
        let request = req
            .timeout(REQUEST_TIMEOUT)
            .build()
            .with_context(unreachable)?;
        let read = matches!(
            *request.method(),
            reqwest::Method::GET | reqwest::Method::HEAD
        );
        let mut request = request;
        let mut delay = FIRST_RETRY_DELAY;
        let mut attempt = 1;
        loop {
            let again = if read && attempt < ATTEMPTS {
                request.try_clone()
            } else {
                None
            };
            let result = self.http.execute(request).await;
            let busy = match &result {
                Err(e) => e.is_connect(),
                Ok(res) => matches!(res.status().as_u16(), 502..=504),
            };
            match again {
                Some(next) if busy => {
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                    attempt += 1;
                    request = next;
                }
                _ => return answer(result.with_context(unreachable)?).await,
            }
        }
    }
}

/// The JSON of a 2xx answer, else the refusal it carries.
pub async fn answer(res: reqwest::Response) -> anyhow::Result<Value> {
    let status = res.status().as_u16();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    if (200..300).contains(&status) {
        Ok(body)
    } else {
        Err(Failure::from_answer(status, body).into())
    }
}

/// Prints `rows` under `headers` in aligned columns (the text output of list commands).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    if rows.is_empty() {
        return eline("(none)");
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let render = |cells: &mut dyn Iterator<Item = &str>| {
        let parts: Vec<String> = cells
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        parts.join("  ").trim_end().to_owned()
    };
    let mut out = render(&mut headers.iter().copied());
    out.push('\n');
    for row in rows {
        out.push_str(&render(&mut row.iter().map(String::as_str)));
        out.push('\n');
    }
    super::output::print(&out)
}

/// A list answer as the command's output: the JSON itself, or a table of `columns` (header,
/// key) over its `items`.
pub fn show_list(json: bool, listed: &Value, columns: &[(&str, &str)]) -> anyhow::Result<()> {
    let headers: Vec<&str> = columns.iter().map(|(h, _)| *h).collect();
    show_rows(json, listed, &headers, |item| {
        columns.iter().map(|(_, k)| cell(&item[*k])).collect()
    })
}

/// A list answer as the command's output: the JSON itself, or a table under `headers` of one
/// `row` per item of its `items` (for cells computed from several fields).
pub fn show_rows(
    json: bool,
    listed: &Value,
    headers: &[&str],
    row: impl Fn(&Value) -> Vec<String>,
) -> anyhow::Result<()> {
    if json {
        return print_json(listed);
    }
    let rows: Vec<Vec<String>> = items(listed).iter().map(row).collect();
    table(headers, &rows)
}

/// The `items` of a list answer (none when it has no such array).
pub fn items(listed: &Value) -> &[Value] {
    listed["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Workspaces (`workspace_id`, `name`, `role`) as a table, `*` marking the `active` one.
pub fn workspace_table(workspaces: &Value, active: Option<&str>) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = workspaces
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|w| {
            let id = cell(&w["workspace_id"]);
            let mark = if active == Some(id.as_str()) { "*" } else { "" };
            vec![mark.to_owned(), id, cell(&w["name"]), cell(&w["role"])]
        })
        .collect();
    table(&["", "WORKSPACE", "NAME", "ROLE"], &rows)
}

/// A JSON value as a table cell: strings as they are, null as `-`, lists joined.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) if s.is_empty() => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => "-".into(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Prints `pairs` as `key: value` lines (the text output of show commands).
pub fn fields(value: &Value, keys: &[&str]) -> anyhow::Result<()> {
    let width = keys.iter().map(|k| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for key in keys {
        out.push_str(&format!("{key:<width$}  {}\n", cell(&value[*key])));
    }
    super::output::print(&out)
}

/// Prints the server's answer as JSON (for `--output json`).
pub fn print_json(value: &Value) -> anyhow::Result<()> {
    line(serde_json::to_string_pretty(value)?)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A server on loopback that answers each request with the next of `statuses` (the last
    /// one again once they run out), counting the requests.
    async fn server(statuses: &'static [u16]) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(AtomicUsize::new(0));
        let count = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let n = count.fetch_add(1, Ordering::SeqCst);
                let status = statuses[n.min(statuses.len() - 1)];
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && socket.read(&mut byte).await.unwrap_or(0) == 1
                {
                    head.push(byte[0]);
                }
                let body = if status == 200 {
                    r#"{"ok":true}"#.to_owned()
                } else {
                    format!(r#"{{"error":{{"code":"busy","message":"status {status}"}}}}"#)
                };
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            }
        });
        (base, seen)
    }

    #[tokio::test]
    async fn a_read_is_tried_again_while_the_server_cannot_take_it() {
        let (base, seen) = server(&[503, 502, 200]).await;
        let client = Client::new(base, "pat_x".into(), None);
        assert_eq!(
            client.get("/v1/x").await.unwrap(),
            serde_json::json!({"ok": true})
        );
        assert_eq!(seen.load(Ordering::SeqCst), 3);
        // Never more than ATTEMPTS tries: the refusal of the last one is the answer.
        let (base, seen) = server(&[503]).await;
        let client = Client::new(base, "pat_x".into(), None);
        let err = client.get("/v1/x").await.unwrap_err();
        let failure = err.downcast_ref::<Failure>().expect("a refusal");
        assert_eq!(failure.status, Some(503));
        assert_eq!(seen.load(Ordering::SeqCst), ATTEMPTS as usize);
    }

    #[tokio::test]
    async fn a_change_is_sent_once_and_an_unreachable_server_is_said_so() {
        let (base, seen) = server(&[503, 200]).await;
        let client = Client::new(base, "pat_x".into(), None);
        let err = client
            .post("/v1/x", &serde_json::json!({}))
            .await
            .unwrap_err();
        assert_eq!(
            err.downcast_ref::<Failure>().and_then(|f| f.status),
            Some(503)
        );
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        // A port nothing listens on: the read is tried ATTEMPTS times, then named.
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        let client = Client::new(base.clone(), "pat_x".into(), None);
        let err = client.get("/v1/x").await.unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("cannot reach the acp server at {base}")),
            "{err}"
        );
    }
}
