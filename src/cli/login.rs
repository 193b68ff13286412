//! `acp login`, `acp logout`, `acp whoami` and `acp token`: a person's identity from a terminal.
//!
//! `acp login` runs the magic-link login the browser runs, except that the person pastes the
//! link (or its token) from the email into the terminal. The session it gets is used once, to
//! make a personal access token for this terminal, and then ended: the token (named after the
//! machine, 90 days unless `--expires` says otherwise) is what is stored, per server, in the
//! credentials file (see `credentials.rs`). `acp logout` revokes it and forgets it.

use std::io::{BufRead, IsTerminal};
use std::time::Duration;

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::json;

use super::client::{
    answer, cell, finish, normalize, print_json, show_list, workspace_table, Client, ClientArgs,
    Failure, YesArg,
};
use super::credentials::{Credentials, Login};
use super::output::{eline, line};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Paste the link from the email (or the token after `token=`) when asked; on a laptop whose server keeps mail in its outbox, read it with `acp admin outbox list`, or let `--outbox` read it from the server's database.\nExit codes: 0 logged in, 1 any error, 3 the link was used, 4 the link is not valid or expired."
)]
pub struct LoginArgs {
    /// The address to log in as [default: asked]
    #[arg(long)]
    pub email: Option<String>,
    /// Take the login link from the server's outbox instead of asking for it: for a server on
    /// this machine that keeps its mail in the outbox (the default); reads the server's
    /// database (--database-url)
    #[arg(long)]
    pub outbox: bool,
    #[command(flatten)]
    pub db: super::DatabaseArgs,
    /// How long the stored token lives, e.g. `90d`, `12w` (1 to 365 days)
    #[arg(long, default_value = "90d", value_parser = parse_days)]
    pub expires: i64,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Args)]
pub struct LogoutArgs {
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Args)]
pub struct WhoamiArgs {
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a personal access token (printed once), e.g. for CI
    Create {
        /// What it is for, e.g. `ci`
        #[arg(long)]
        name: String,
        /// Lifetime, e.g. `30d`, `90d`, `12w` (1 to 365 days; a token made with a token lives
        /// no longer than that token)
        #[arg(long, default_value = "90d", value_parser = parse_days)]
        expires: i64,
        /// Narrow it (repeat or separate with commas)
        #[arg(long = "scope", value_delimiter = ',',
            value_parser = clap::builder::PossibleValuesParser::new(crate::domain::access::TOKEN_SCOPES))]
        scopes: Vec<String>,
    },
    /// Your tokens (never the tokens themselves)
    List,
    /// Revoke one of your tokens; it stops working at once
    Revoke {
        /// The token: its name (when no other live token of yours has it) or its id (`pat_...`)
        #[arg(value_name = "TOKEN")]
        which: String,
        #[command(flatten)]
        yes: YesArg,
    },
}

/// `90d`, `12w`, `90` (days) as a number of days from 1 to 365.
pub fn parse_days(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let days = if let Ok(n) = text.parse::<i64>() {
        n
    } else {
        let d = humantime::parse_duration(text)
            .map_err(|e| format!("`{text}` is not a duration like `90d`: {e}"))?;
        i64::try_from(d.as_secs() / 86_400).unwrap_or(i64::MAX)
    };
    if (1..=365).contains(&days) {
        Ok(days)
    } else {
        Err(format!(
            "`{text}` must be between 1 and 365 days (whole days)"
        ))
    }
}

/// The token of a pasted login link, or the pasted token itself.
fn token_of_paste(pasted: &str) -> String {
    let pasted = pasted.trim();
    match reqwest::Url::parse(pasted) {
        Ok(url) => url
            .query_pairs()
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default(),
        Err(_) => pasted.to_owned(),
    }
}

/// The server's outbox, read for one person's new login link (`acp login --outbox`). Reading
/// it takes the server's database, which already gives everything a login gives; the link is
/// used at once and never printed.
struct Outbox {
    store: std::sync::Arc<crate::store::SqlStore>,
    email: String,
    url: String,
    /// The messages that were there before the link was asked for.
    before: std::collections::HashSet<String>,
}

/// The outbox messages looked at: the newest ones, where a link just sent is.
const OUTBOX_WINDOW: i64 = 50;

impl Outbox {
    async fn open(db: &super::DatabaseArgs, email: &str) -> anyhow::Result<Outbox> {
        use crate::store::EmailStore;
        let config = db.resolve(crate::config::Settings::default())?;
        let store = super::DatabaseArgs::open(&config)
            .await
            .map_err(|e| Failure::local(1, format!("--outbox: {e:#}")))?;
        let before = store
            .outbox(OUTBOX_WINDOW)
            .await?
            .into_iter()
            .map(|m| m.id)
            .collect();
        Ok(Outbox {
            store,
            email: email.trim().to_ascii_lowercase(),
            url: crate::secret::redact_url(&config.database_url),
            before,
        })
    }

    /// The token of the login link mailed to the person since [`Outbox::open`]; waits a few
    /// seconds for it.
    async fn link(self) -> anyhow::Result<String> {
        use crate::store::EmailStore;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let found = loop {
            let messages = self.store.outbox(OUTBOX_WINDOW).await?;
            let token = messages
                .iter()
                .filter(|m| !self.before.contains(&m.id))
                .filter(|m| {
                    m.recipients
                        .iter()
                        .any(|r| r.eq_ignore_ascii_case(&self.email))
                })
                .find_map(|m| m.text_body.as_deref().and_then(login_token_in));
            if token.is_some() || std::time::Instant::now() >= deadline {
                break token;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        self.store.close().await;
        found.ok_or_else(|| {
            Failure::local(
                1,
                format!(
                    "no login link for {} arrived in the outbox of {}: is this address a member of a workspace on this server (`acp serve --owner EMAIL` makes the first owner), and does the server keep its mail in the outbox (the default)? Otherwise paste the link from the email: run without --outbox",
                    self.email, self.url
                ),
            )
            .into()
        })
    }
}

/// The token of the login link in a message's text.
fn login_token_in(text: &str) -> Option<String> {
    let start = text.find("/auth/verify-login?token=")? + "/auth/verify-login?token=".len();
    let token: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!token.is_empty()).then_some(token)
}

fn read_line(prompt: &str) -> anyhow::Result<String> {
    if std::io::stdin().is_terminal() {
        eprint!("{prompt}");
    } else {
        eline(prompt.trim_end())?;
    }
    let mut text = String::new();
    let read = std::io::stdin().lock().read_line(&mut text)?;
    if read == 0 {
        return Err(Failure::local(1, "no answer on stdin").into());
    }
    Ok(text.trim().to_owned())
}

/// The session of a `Set-Cookie` answer (`acp_session` or its `__Host-` form).
fn session_cookie(res: &reqwest::Response) -> Option<String> {
    res.headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| cookie::Cookie::parse(v.to_owned()).ok())
        .find(|c| c.name().ends_with("acp_session") && !c.value().is_empty())
        .map(|c| format!("{}={}", c.name(), c.value()))
}

pub async fn login(args: &LoginArgs) -> anyhow::Result<i32> {
    finish(login_inner(args).await, args.client.json())
}

async fn login_inner(args: &LoginArgs) -> anyhow::Result<i32> {
    let path = args.client.credentials_path()?;
    let mut stored = Credentials::load(&path)?;
    let server = match (&args.client.server, &stored.current) {
        (Some(s), _) => normalize(s),
        (None, Some(current)) => current.clone(),
        (None, None) => return Err(Failure::local(1, "which server? pass --server URL").into()),
    };
    let email = match &args.email {
        Some(e) => e.clone(),
        None => read_line("Email address: ")?,
    };
    // Opened before the link is asked for: a database that is not there fails first.
    let outbox = match args.outbox {
        true => Some(Outbox::open(&args.db, &email).await?),
        false => None,
    };
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()?;
    let reach = || format!("cannot reach the acp server at {server}");
    let started = answer(
        http.post(format!("{server}/auth/start-login"))
            .json(&json!({ "email": email }))
            .send()
            .await
            .with_context(reach)?,
    )
    .await?;
    let token = match outbox {
        Some(outbox) => outbox.link().await?,
        None => {
            eline(format!(
                "A login link is on its way to {email}. {}",
                started["message"]
                    .as_str()
                    .and_then(|m| m.split_once(". ").map(|(_, hint)| hint))
                    .unwrap_or("")
            ))?;
            token_of_paste(&read_line("Paste the link (or its token): ")?)
        }
    };
    if token.is_empty() {
        return Err(Failure::local(1, "that is not a login link").into());
    }
    let res = http
        .post(format!("{server}/auth/verify-login"))
        .json(&json!({ "token": token }))
        .send()
        .await
        .with_context(reach)?;
    let cookie = session_cookie(&res);
    let verified = answer(res)
        .await
        .map_err(|e| match e.downcast::<Failure>() {
            // An invalid or expired link is "not logged in" (4); a used one a conflict (3).
            Ok(mut f) if f.status == Some(400) || f.status == Some(410) => {
                f.exit = 4;
                f.into()
            }
            Ok(f) => f.into(),
            Err(e) => e,
        })?;
    let cookie = cookie.context("the server set no session cookie")?;
    let csrf = verified["csrf_token"].as_str().unwrap_or("").to_owned();
    let session = |req: reqwest::RequestBuilder| {
        req.header(reqwest::header::COOKIE, &cookie)
            .header("X-CSRF-Token", &csrf)
    };
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "a terminal".into());
    let made = answer(
        session(http.post(format!("{server}/v1/auth/tokens")))
            .json(
                &json!({ "name": format!("acp login on {host}"), "expires_in_days": args.expires }),
            )
            .send()
            .await
            .with_context(reach)?,
    )
    .await?;
    // The session was only the way to the token.
    let _ = session(http.post(format!("{server}/auth/logout")))
        .json(&json!({}))
        .send()
        .await;
    let login = Login {
        token: made["token"].as_str().unwrap_or("").to_owned(),
        token_id: made["access_token"]["token_id"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        email: verified["user"]["email"].as_str().unwrap_or("").to_owned(),
        user_id: verified["user"]["user_id"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        expires_at: made["access_token"]["expires_at"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        workspace: args
            .client
            .workspace
            .clone()
            .or_else(|| verified["active_workspace_id"].as_str().map(str::to_owned)),
    };
    if let Some(old) = stored.servers.get(&server) {
        // A second login replaces the first: its token goes.
        let _ = Client::new(server.clone(), old.token.clone(), None)
            .post(
                &format!("/v1/auth/tokens/{}/revoke", old.token_id),
                &json!({}),
            )
            .await;
    }
    stored.servers.insert(server.clone(), login.clone());
    stored.current = Some(server.clone());
    stored.save(&path)?;
    if args.client.json() {
        print_json(&json!({
            "ok": true, "server": server, "email": login.email, "user_id": login.user_id,
            "token_id": login.token_id, "expires_at": login.expires_at,
            "workspace_id": login.workspace, "credentials": path,
        }))?;
    } else {
        line(format!(
            "Logged in to {server} as {} (token {} expires {}); stored in {}",
            login.email,
            login.token_id,
            login.expires_at,
            path.display()
        ))?;
    }
    Ok(0)
}

pub async fn logout(args: &LogoutArgs) -> anyhow::Result<i32> {
    let result = async {
        let path = args.client.credentials_path()?;
        let mut stored = Credentials::load(&path)?;
        let server = match &args.client.server {
            Some(s) => normalize(s),
            None => stored
                .current
                .clone()
                .ok_or_else(|| Failure::local(4, "not logged in"))?,
        };
        let Some(login) = stored.servers.remove(&server) else {
            return Err(Failure::local(4, format!("not logged in to {server}")).into());
        };
        let revoked = Client::new(server.clone(), login.token.clone(), None)
            .post(
                &format!("/v1/auth/tokens/{}/revoke", login.token_id),
                &json!({}),
            )
            .await;
        if stored.current.as_deref() == Some(server.as_str()) {
            stored.current = stored.servers.keys().next().cloned();
        }
        stored.save(&path)?;
        let note = match &revoked {
            Ok(_) => "token revoked".to_owned(),
            // Already revoked or expired: nothing left to undo.
            Err(e) => format!("the token was not revoked: {e}"),
        };
        if args.client.json() {
            print_json(&json!({"ok": true, "server": server, "revoked": revoked.is_ok()}))?;
        } else {
            line(format!("Logged out of {server} ({note})"))?;
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

pub async fn whoami(args: &WhoamiArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let me = client.get("/auth/me").await?;
        if args.client.json() {
            let mut out = me.clone();
            out["server"] = json!(client.server);
            out["workspace_id"] = json!(client.workspace);
            return print_json(&out).map(|()| 0);
        }
        line(format!(
            "{} ({}) on {}",
            cell(&me["user"]["email"]),
            cell(&me["user"]["user_id"]),
            client.server
        ))?;
        let active = client
            .workspace
            .clone()
            .or_else(|| me["active_workspace_id"].as_str().map(str::to_owned));
        workspace_table(&me["workspaces"], active.as_deref())?;
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

pub async fn token(args: &TokenArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        match &args.command {
            TokenCommand::Create {
                name,
                expires,
                scopes,
            } => {
                let made = client
                    .post(
                        "/v1/auth/tokens",
                        &json!({"name": name, "expires_in_days": expires, "scopes": scopes}),
                    )
                    .await?;
                if args.client.json() {
                    print_json(&made)?;
                } else {
                    // The token alone on stdout (for `$(...)`), the rest on stderr.
                    line(cell(&made["token"]))?;
                    eline(format!(
                        "token {} ({}) expires {}; it is shown only this once",
                        cell(&made["access_token"]["token_id"]),
                        name,
                        cell(&made["access_token"]["expires_at"])
                    ))?;
                }
            }
            TokenCommand::List => {
                let listed = client.get("/v1/auth/tokens").await?;
                show_list(
                    args.client.json(),
                    &listed,
                    &[
                        ("TOKEN", "token_id"),
                        ("NAME", "name"),
                        ("SCOPES", "scopes"),
                        ("EXPIRES", "expires_at"),
                        ("LAST USED", "last_used_at"),
                        ("REVOKED", "revoked_at"),
                    ],
                )?;
            }
            TokenCommand::Revoke { which, yes } => {
                let token_id = super::resolve::token(&client, which).await?;
                let token_id = token_id.as_str();
                let what = if which == token_id {
                    token_id.to_owned()
                } else {
                    format!("{which} ({token_id})")
                };
                yes.confirm(&format!("revoke token {what}"))?;
                let done = client
                    .post(&format!("/v1/auth/tokens/{token_id}/revoke"), &json!({}))
                    .await?;
                if args.client.json() {
                    print_json(&done)?;
                } else {
                    // The tokens made with it go with it.
                    let made = done["revoked"].as_i64().unwrap_or(1) - 1;
                    match made {
                        0 => line(format!("revoked {token_id}"))?,
                        n => line(format!("revoked {token_id} and {n} token(s) made with it"))?,
                    }
                }
            }
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_and_pasted_links() {
        assert_eq!(parse_days("90d"), Ok(90));
        assert_eq!(parse_days("2w"), Ok(14));
        assert_eq!(parse_days("30"), Ok(30));
        assert!(parse_days("0d").is_err());
        assert!(parse_days("400d").is_err());
        assert!(parse_days("soon").is_err());
        assert_eq!(
            token_of_paste(" http://127.0.0.1:8080/auth/verify-login?token=lgn_abc \n"),
            "lgn_abc"
        );
        assert_eq!(token_of_paste("lgn_abc"), "lgn_abc");
        assert_eq!(
            login_token_in("Open this link:\n\nhttp://h/auth/verify-login?token=lgn_aB3\n\nIf")
                .as_deref(),
            Some("lgn_aB3")
        );
        assert_eq!(login_token_in("no link here"), None);
    }
}
