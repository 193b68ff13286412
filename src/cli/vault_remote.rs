//! `acp vault sets|put|versions|rollback|grant|grants|lease|leases|revoke`: the vault's
//! administration on a running server, over `/v1/vault/*`, with the client flags (`--server`,
//! `--token`, `--workspace`, `--output`) of every client command.
//!
//! A set is named by its id (`ss_...`), its number, or its name (looked up in the workspace's
//! list, which needs a person's token: an API key names sets by id or number). No value is ever
//! printed: answers carry key names and versions only, and a value given to `put` is sent once
//! and forgotten. A value on the command line is visible to other local users (`ps`, shell
//! history), so `put` also reads values from a dotenv file or from stdin.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};
use std::path::PathBuf;

use serde_json::{json, Map, Value};

use super::client::{
    cell, finish, items, print_json, show_list, show_rows, Client, ClientArgs, Failure, YesArg,
};
use super::output::{eline, line};
use crate::time::{iso, now_ms};

#[derive(Debug, clap::Args)]
pub struct SetsArgs {
    /// List deleted sets too
    #[arg(long)]
    deleted: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Values on the command line (KEY=VALUE) are visible to other users of this \
machine (process list, shell history): prefer --value-stdin or --from-dotenv for real secrets.\n\n\
Examples:\n  printf %s \"$STRIPE_KEY\" | acp vault put stripe-prod --value-stdin STRIPE_SECRET_KEY\n  \
acp vault put stripe-prod --from-dotenv .env.production\n  \
acp vault put stripe-prod --provider stripe --environment production --from-dotenv .env --profiles profiles.json"
)]
pub struct PutArgs {
    /// The set: its name, id (`ss_...`) or number
    set: String,
    /// Entries to write, as KEY=VALUE (visible to other local users: see below)
    #[arg(value_name = "KEY=VALUE")]
    pairs: Vec<String>,
    /// Read entries from a dotenv file (`KEY=value` lines, `export ` prefixes, quotes, `#`
    /// comments); `-` reads stdin
    #[arg(long, value_name = "FILE")]
    from_dotenv: Option<PathBuf>,
    /// Read the value of KEY from stdin (all of it, less one final newline); on a terminal it is
    /// asked for without echo
    #[arg(long, value_name = "KEY")]
    value_stdin: Option<String>,
    /// Remove this key in the new version (repeat for more)
    #[arg(long, value_name = "KEY")]
    unset: Vec<String>,
    /// Replace the set's proxy profiles with this JSON file (`{NAME: {hosts, inject, ...}}`)
    #[arg(long, value_name = "FILE")]
    profiles: Option<PathBuf>,
    /// Create the set when no set has this name: its provider (e.g. `stripe`)
    #[arg(long, requires = "environment")]
    provider: Option<String>,
    /// Create the set when no set has this name: its environment (e.g. `production`)
    #[arg(long, requires = "provider")]
    environment: Option<String>,
    /// Write only if the set is still at this version (else exit 3)
    #[arg(long, value_name = "VERSION")]
    expected_version: Option<i64>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Args)]
pub struct VersionsArgs {
    /// The set: its name, id (`ss_...`) or number
    set: String,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    /// The set: its name, id (`ss_...`) or number
    set: String,
    /// The kept version whose entries and profiles become the new version
    #[arg(long, value_name = "VERSION")]
    to: i64,
    /// Roll back only if the set is still at this version (else exit 3)
    #[arg(long, value_name = "VERSION")]
    expected_version: Option<i64>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("to").required(true).args(["agent", "group"])))]
#[command(group(clap::ArgGroup::new("which_keys").required(true).args(["keys", "all_keys"])))]
#[command(
    after_help = "Actions: `proxy` (acp makes calls with the secrets injected; the agent \
never sees them), `read` (the agent reads values; never implied by `proxy`), `mint_lease` (the \
agent mints request leases from a workflow lease: needed with either). Aliases accepted: \
`proxy_use`, `mint_request_lease` and the `vault.` names.\n\n\
Example:\n  acp vault grant stripe-prod --agent agt_... --actions proxy,mint_lease --all-keys"
)]
pub struct GrantArgs {
    /// The set: its name, id (`ss_...`) or number
    set: String,
    /// The agent (`agt_...`)
    #[arg(long)]
    agent: Option<String>,
    /// An agent group of the workspace's policy specs (every member of it)
    #[arg(long)]
    group: Option<String>,
    /// What it may do: `proxy`, `read`, `mint_lease` (repeat or separate with commas)
    #[arg(long, value_delimiter = ',', required = true)]
    actions: Vec<String>,
    /// Only these keys (repeat or separate with commas)
    #[arg(long, value_delimiter = ',')]
    keys: Vec<String>,
    /// Every key of the set, also keys added later
    #[arg(long)]
    all_keys: bool,
    /// When the grant ends (RFC 3339, e.g. `2030-01-31T00:00:00Z`) [default: never]
    #[arg(long)]
    expires_at: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Args)]
pub struct GrantsArgs {
    /// Only this set's grants: its name, id (`ss_...`) or number
    set: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The token (`vwl_...`) is printed once, alone on stdout (the lease's facts \
go to stderr), and the server keeps only its hash: hand it to the agent, which mints short \
request leases from it with its own signed requests.\n\n\
Example:\n  token=$(acp vault lease stripe-prod --agent agt_... --actions proxy --purpose \"nightly payouts\" --ttl 1h)"
)]
pub struct LeaseArgs {
    /// The set: its name, id (`ss_...`) or number
    set: String,
    /// The agent the lease is for (`agt_...`; it must be active)
    #[arg(long)]
    agent: String,
    /// What its request leases may be for: `proxy`, `read` (repeat or separate with commas)
    #[arg(long, value_delimiter = ',', required = true)]
    actions: Vec<String>,
    /// Why (audited; 1 to 200 characters)
    #[arg(long)]
    purpose: String,
    /// How long it lasts: seconds, or a duration such as `30m` or `8h` (at most 24h)
    /// [default: 1h]
    #[arg(long, value_parser = ttl_seconds)]
    ttl: Option<i64>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LeaseKind {
    Workflow,
    Request,
}

#[derive(Debug, clap::Args)]
pub struct LeasesArgs {
    /// Only this set's leases: its name, id (`ss_...`) or number
    #[arg(long)]
    set: Option<String>,
    /// Only this agent's leases
    #[arg(long)]
    agent: Option<String>,
    /// Only workflow or request leases
    #[arg(long, value_enum)]
    kind: Option<LeaseKind>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args(["id", "agent", "set"])))]
pub struct RevokeArgs {
    /// A lease (`ls_...`: the request leases minted from it too) or a grant (`grt_...`)
    #[arg(conflicts_with_all = ["agent", "set"])]
    id: Option<String>,
    /// Every live lease of this agent (with --set: of this agent on that set)
    #[arg(long)]
    agent: Option<String>,
    /// Every live lease of this set: its name, id (`ss_...`) or number
    #[arg(long)]
    set: Option<String>,
    #[command(flatten)]
    yes: YesArg,
    #[command(flatten)]
    client: ClientArgs,
}

/// `--ttl`: whole seconds, or a duration (`90s`, `30m`, `8h`).
fn ttl_seconds(text: &str) -> Result<i64, String> {
    let secs = match text.parse::<i64>() {
        Ok(n) => n,
        Err(_) => humantime::parse_duration(text)
            .map_err(|e| format!("`{text}` is neither seconds nor a duration such as `30m`: {e}"))?
            .as_secs()
            .try_into()
            .map_err(|_| "too long".to_owned())?,
    };
    if secs < 1 {
        return Err("must be at least one second".into());
    }
    Ok(secs)
}

fn not_found(code: &str, message: String) -> Failure {
    Failure {
        exit: 6,
        status: None,
        code: code.to_owned(),
        body: json!({"ok": false, "error": code, "message": message}),
        message,
    }
}

/// True for what names a set by id (`ss_` and letters, digits, `_`) or by number.
fn is_id_or_number(set: &str) -> bool {
    let id = set
        .strip_prefix("ss_")
        .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric()));
    let number = !set.is_empty() && set.chars().all(|c| c.is_ascii_digit());
    id || number
}

/// The set named `name` (not an id or number), deleted ones included, or none.
async fn set_named(client: &Client, name: &str) -> anyhow::Result<Option<Value>> {
    let listed = client
        .get("/v1/vault/secret-sets?include_deleted=true")
        .await?;
    Ok(items(&listed)
        .iter()
        .find(|s| s["name"].as_str() == Some(name))
        .cloned())
}

/// How paths and bodies name `set`: its id or number as given, or the id of the set of that
/// name (404 when there is none).
pub(super) async fn set_ref(client: &Client, set: &str) -> anyhow::Result<String> {
    if is_id_or_number(set) {
        return Ok(set.to_owned());
    }
    match set_named(client, set).await? {
        Some(found) => Ok(cell(&found["secret_set_id"])),
        None => Err(not_found(
            "unknown_secret_set",
            format!("no secret set of this workspace is named `{set}`"),
        )
        .into()),
    }
}

/// An id typed on the command line, checked before it goes into a path.
fn checked_id(id: &str) -> anyhow::Result<&str> {
    if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(id)
    } else {
        Err(Failure::local(1, format!("`{id}` is not an id")).into())
    }
}

/// `live`, `revoked` or `expired` (and `used` for a request lease with no use left).
fn state(item: &Value, now: &str) -> &'static str {
    if !item["revoked_at"].is_null() {
        "revoked"
    } else if item["expires_at"].as_str().is_some_and(|at| at <= now) {
        "expired"
    } else if item["uses_left"].as_i64() == Some(0) {
        "used"
    } else {
        "live"
    }
}

pub async fn sets(args: &SetsArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let path = if args.deleted {
            "/v1/vault/secret-sets?include_deleted=true"
        } else {
            "/v1/vault/secret-sets"
        };
        let listed = client.get(path).await?;
        show_rows(
            args.client.json(),
            &listed,
            &[
                "#",
                "SET",
                "NAME",
                "PROVIDER",
                "ENVIRONMENT",
                "VERSION",
                "KEYS",
                "PROFILES",
                "STATE",
            ],
            |s| {
                let profiles: Vec<String> = s["profiles"]
                    .as_object()
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                let state = if !s["destroyed_at"].is_null() {
                    "destroyed"
                } else if !s["deleted_at"].is_null() {
                    "deleted"
                } else {
                    "live"
                };
                vec![
                    cell(&s["number"]),
                    cell(&s["secret_set_id"]),
                    cell(&s["name"]),
                    cell(&s["provider"]),
                    cell(&s["environment"]),
                    cell(&s["version"]),
                    cell(&s["keys"]),
                    cell(&json!(profiles)),
                    state.to_owned(),
                ]
            },
        )?;
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

/// The entries `put` writes, from every source it was given; a key given twice is refused. No
/// error names a value.
fn entries_of(args: &PutArgs) -> anyhow::Result<BTreeMap<String, String>> {
    let mut entries: BTreeMap<String, String> = BTreeMap::new();
    let mut add = |key: String, value: String| -> anyhow::Result<()> {
        if entries.contains_key(&key) {
            return Err(Failure::local(1, format!("`{key}` is given twice")).into());
        }
        entries.insert(key, value);
        Ok(())
    };
    for (n, pair) in args.pairs.iter().enumerate() {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(Failure::local(
                1,
                format!("argument {} after the set is not KEY=VALUE", n + 1),
            )
            .into());
        };
        add(key.trim().to_owned(), value.to_owned())?;
    }
    let dotenv_stdin = args.from_dotenv.as_deref() == Some(std::path::Path::new("-"));
    if dotenv_stdin && args.value_stdin.is_some() {
        return Err(Failure::local(
            1,
            "--from-dotenv - and --value-stdin both read stdin: give one of them",
        )
        .into());
    }
    if let Some(file) = &args.from_dotenv {
        let text = if dotenv_stdin {
            read_stdin()?
        } else {
            std::fs::read_to_string(file)
                .map_err(|e| Failure::local(1, format!("cannot read {}: {e}", file.display())))?
        };
        let name = if dotenv_stdin {
            "stdin".to_owned()
        } else {
            file.display().to_string()
        };
        for (n, item) in dotenvy::from_read_iter(text.as_bytes()).enumerate() {
            // dotenvy's message quotes the line, which may hold a value: name the entry only.
            let (key, value) = item.map_err(|_| {
                Failure::local(
                    1,
                    format!("{name}: entry {} is not `KEY=value` dotenv text", n + 1),
                )
            })?;
            add(key, value)?;
        }
    }
    if let Some(key) = &args.value_stdin {
        let value = if std::io::stdin().is_terminal() {
            rpassword::prompt_password(format!("Value of {key} (not shown): "))?
        } else {
            let mut text = read_stdin()?;
            // `echo value |` adds a newline that is not part of the value.
            if text.ends_with('\n') {
                text.pop();
                if text.ends_with('\r') {
                    text.pop();
                }
            }
            text
        };
        add(key.trim().to_owned(), value)?;
    }
    Ok(entries)
}

fn read_stdin() -> anyhow::Result<String> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| Failure::local(1, format!("cannot read stdin: {e}")))?;
    Ok(text)
}

fn profiles_of(file: &std::path::Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::local(1, format!("cannot read {}: {e}", file.display())))?;
    let profiles: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::local(1, format!("{} is not JSON: {e}", file.display())))?;
    if !profiles.is_object() {
        return Err(Failure::local(
            1,
            format!(
                "{} must hold a JSON object of profiles: {{NAME: {{hosts, inject, ...}}}}",
                file.display()
            ),
        )
        .into());
    }
    Ok(profiles)
}

/// `name (ss_..., number N): version V, keys A, B` of a set's answer.
fn set_line(set: &Value) -> String {
    format!(
        "{} ({}, number {}): version {}, keys {}",
        cell(&set["name"]),
        cell(&set["secret_set_id"]),
        cell(&set["number"]),
        cell(&set["version"]),
        cell(&set["keys"]),
    )
}

pub async fn put(args: &PutArgs) -> anyhow::Result<i32> {
    let result = async {
        let entries = entries_of(args)?;
        let profiles = args.profiles.as_deref().map(profiles_of).transpose()?;
        if entries.is_empty() && args.unset.is_empty() && profiles.is_none() {
            return Err(Failure::local(
                1,
                "nothing to put: give KEY=VALUE, --from-dotenv, --value-stdin, --unset or --profiles",
            )
            .into());
        }
        if let Some(key) = args.unset.iter().find(|k| entries.contains_key(*k)) {
            return Err(
                Failure::local(1, format!("`{key}` is both given a value and unset")).into(),
            );
        }
        if is_id_or_number(&args.set) && (args.provider.is_some() || args.environment.is_some()) {
            return Err(Failure::local(
                1,
                "--provider and --environment create a set: name it by its name, not its id or number",
            )
            .into());
        }
        let client = args.client.connect()?;
        let entries: Map<String, Value> = entries
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        let existing = if is_id_or_number(&args.set) {
            None
        } else {
            Some(set_named(&client, &args.set).await?)
        };
        let answer = match existing {
            // No set of that name: create it, if the command says what it is for.
            Some(None) => {
                let (Some(provider), Some(environment)) = (&args.provider, &args.environment)
                else {
                    return Err(not_found(
                        "unknown_secret_set",
                        format!(
                            "no secret set of this workspace is named `{}`: give --provider and --environment to create it",
                            args.set
                        ),
                    )
                    .into());
                };
                if !args.unset.is_empty() || args.expected_version.is_some() {
                    return Err(Failure::local(
                        1,
                        "--unset and --expected-version need an existing set",
                    )
                    .into());
                }
                let made = client
                    .post(
                        "/v1/vault/secret-sets",
                        &json!({"name": args.set, "provider": provider, "environment": environment,
                            "entries": entries, "profiles": profiles}),
                    )
                    .await?;
                if !args.client.json() {
                    line(format!("created {}", set_line(&made["secret_set"])))?;
                }
                made
            }
            found => {
                let id = match &found {
                    Some(Some(set)) => {
                        for (flag, given, field) in [
                            ("--provider", &args.provider, "provider"),
                            ("--environment", &args.environment, "environment"),
                        ] {
                            if let Some(given) = given {
                                if set[field].as_str() != Some(given.as_str()) {
                                    return Err(Failure::local(
                                        1,
                                        format!(
                                            "{flag} {given}: the set `{}` has {field} `{}`, which does not change",
                                            args.set,
                                            cell(&set[field])
                                        ),
                                    )
                                    .into());
                                }
                            }
                        }
                        cell(&set["secret_set_id"])
                    }
                    _ => args.set.clone(),
                };
                let mut body = json!({"expected_version": args.expected_version});
                if !entries.is_empty() {
                    body["set"] = Value::Object(entries);
                }
                if !args.unset.is_empty() {
                    body["unset"] = json!(args.unset);
                }
                if let Some(profiles) = profiles {
                    body["profiles"] = profiles;
                }
                let updated = client
                    .post(&format!("/v1/vault/secret-sets/{id}"), &body)
                    .await?;
                if !args.client.json() {
                    line(format!("wrote {}", set_line(&updated["secret_set"])))?;
                }
                updated
            }
        };
        if args.client.json() {
            print_json(&answer)?;
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

pub async fn versions(args: &VersionsArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let id = set_ref(&client, &args.set).await?;
        let listed = client
            .get(&format!("/v1/vault/secret-sets/{id}/versions"))
            .await?;
        show_list(
            args.client.json(),
            &listed,
            &[
                ("VERSION", "version"),
                ("KEYS", "keys"),
                ("AUTHOR", "author"),
                ("CREATED", "created_at"),
            ],
        )?;
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

pub async fn rollback(args: &RollbackArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let id = set_ref(&client, &args.set).await?;
        let rolled = client
            .post(
                &format!("/v1/vault/secret-sets/{id}/rollback"),
                &json!({"version": args.to, "expected_version": args.expected_version}),
            )
            .await?;
        if args.client.json() {
            print_json(&rolled)?;
        } else {
            line(format!(
                "rolled back to version {}: {}",
                args.to,
                set_line(&rolled["secret_set"])
            ))?;
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

/// `agent agt_...` or `group NAME`.
fn grantee(g: &Value) -> String {
    match (g["agent_id"].as_str(), g["group"].as_str()) {
        (Some(agent), _) => format!("agent {agent}"),
        (None, Some(group)) => format!("group {group}"),
        (None, None) => "-".into(),
    }
}

fn grant_keys(g: &Value) -> String {
    if g["allowed_keys"] == "*" {
        "all".into()
    } else {
        cell(&g["allowed_keys"])
    }
}

pub async fn grant(args: &GrantArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let id = set_ref(&client, &args.set).await?;
        let keys = if args.all_keys {
            json!("*")
        } else {
            json!(args.keys)
        };
        let made = client
            .post(
                "/v1/vault/grants",
                &json!({"secret_set_id": id, "agent_id": args.agent, "group": args.group,
                    "allowed_keys": keys, "allowed_actions": args.actions, "expires_at": args.expires_at}),
            )
            .await?;
        if args.client.json() {
            print_json(&made)?;
        } else {
            let g = &made["grant"];
            line(format!(
                "granted {} to {} on {}: {}; keys {}; expires {}",
                cell(&g["grant_id"]),
                grantee(g),
                cell(&g["secret_set_id"]),
                cell(&g["allowed_actions"]),
                grant_keys(g),
                g["expires_at"].as_str().unwrap_or("never"),
            ))?;
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

pub async fn grants(args: &GrantsArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let path = match &args.set {
            Some(set) => format!(
                "/v1/vault/grants?secret_set_id={}",
                set_ref(&client, set).await?
            ),
            None => "/v1/vault/grants".to_owned(),
        };
        let listed = client.get(&path).await?;
        let now = iso(now_ms());
        show_rows(
            args.client.json(),
            &listed,
            &[
                "GRANT", "SET #", "TO", "ACTIONS", "KEYS", "EXPIRES", "STATE", "BY",
            ],
            |g| {
                vec![
                    cell(&g["grant_id"]),
                    cell(&g["number"]),
                    grantee(g),
                    cell(&g["allowed_actions"]),
                    grant_keys(g),
                    g["expires_at"].as_str().unwrap_or("never").to_owned(),
                    state(g, &now).to_owned(),
                    cell(&g["created_by"]),
                ]
            },
        )?;
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

pub async fn lease(args: &LeaseArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let id = set_ref(&client, &args.set).await?;
        let issued = client
            .post(
                "/v1/vault/leases/workflow",
                &json!({"agent_id": args.agent, "secret_set_id": id, "purpose": args.purpose,
                    "actions": args.actions, "ttl_seconds": args.ttl}),
            )
            .await?;
        if args.client.json() {
            print_json(&issued)?;
        } else {
            line(cell(&issued["workflow_lease_token"]))?;
            eline(format!(
                "workflow lease {} for {} on {}, expires {}; the token is shown only this once: hand it to the agent",
                cell(&issued["lease_id"]),
                args.agent,
                args.set,
                cell(&issued["expires_at"]),
            ))?;
        }
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

pub async fn leases(args: &LeasesArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(set) = &args.set {
            query.push(("secret_set_id", set_ref(&client, set).await?));
        }
        if let Some(agent) = &args.agent {
            query.push(("agent_id", agent.clone()));
        }
        if let Some(kind) = args.kind {
            let kind = match kind {
                LeaseKind::Workflow => "workflow",
                LeaseKind::Request => "request",
            };
            query.push(("kind", kind.to_owned()));
        }
        let listed = client
            .send(
                client
                    .request(reqwest::Method::GET, "/v1/vault/leases")
                    .query(&query),
            )
            .await?;
        let now = iso(now_ms());
        show_rows(
            args.client.json(),
            &listed,
            &[
                "LEASE", "KIND", "AGENT", "SET", "ACTIONS", "KEYS", "USES", "EXPIRES", "STATE",
                "PURPOSE",
            ],
            |l| {
                vec![
                    cell(&l["lease_id"]),
                    cell(&l["kind"]),
                    cell(&l["agent_id"]),
                    cell(&l["secret_set_id"]),
                    cell(&l["actions"]),
                    if l["keys"].is_null() {
                        "all granted".into()
                    } else {
                        cell(&l["keys"])
                    },
                    cell(&l["uses_left"]),
                    cell(&l["expires_at"]),
                    state(l, &now).to_owned(),
                    cell(&l["purpose"]),
                ]
            },
        )?;
        Ok(0)
    }
    .await;
    finish(result, args.client.json())
}

pub async fn revoke(args: &RevokeArgs) -> anyhow::Result<i32> {
    let result = async {
        let client = args.client.connect()?;
        let (what, answer) = match &args.id {
            Some(id) if id.starts_with("grt_") => {
                let id = checked_id(id)?;
                args.yes.confirm(&format!("revoke grant {id}"))?;
                let done = client
                    .post(&format!("/v1/vault/grants/{id}/revoke"), &json!({}))
                    .await?;
                (format!("revoked grant {id}"), done)
            }
            Some(id) if id.starts_with("ls_") => {
                let id = checked_id(id)?;
                args.yes.confirm(&format!("revoke lease {id}"))?;
                let done = client
                    .post(&format!("/v1/vault/leases/{id}/revoke"), &json!({}))
                    .await?;
                let n = done["revoked"].as_i64().unwrap_or(0);
                (
                    format!(
                        "revoked lease {id} ({n} lease(s) with the request leases minted from it)"
                    ),
                    done,
                )
            }
            Some(id) => {
                return Err(Failure::local(
                    1,
                    format!("`{id}` is neither a lease (`ls_...`) nor a grant (`grt_...`)"),
                )
                .into())
            }
            None => {
                let set = match &args.set {
                    Some(set) => Some(set_ref(&client, set).await?),
                    None => None,
                };
                let whose = match (&args.agent, &set) {
                    (Some(a), Some(s)) => format!("agent {a} on set {s}"),
                    (Some(a), None) => format!("agent {a}"),
                    (None, Some(s)) => format!("set {s}"),
                    (None, None) => String::new(),
                };
                args.yes
                    .confirm(&format!("revoke every live lease of {whose}"))?;
                let done = client
                    .post(
                        "/v1/vault/leases/revoke",
                        &json!({"agent_id": args.agent, "secret_set_id": set}),
                    )
                    .await?;
                let n = done["revoked"].as_i64().unwrap_or(0);
                (format!("revoked {n} lease(s) of {whose}"), done)
            }
        };
        if args.client.json() {
            print_json(&answer)?;
        } else {
            line(what)?;
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
    fn sets_are_named_by_id_number_or_name() {
        for id in ["ss_01J0ABC", "1", "42"] {
            assert!(is_id_or_number(id), "{id}");
        }
        for name in ["stripe-prod", "ss_", "ss_a/b", "", "1a", "-1"] {
            assert!(!is_id_or_number(name), "{name}");
        }
    }

    #[test]
    fn a_ttl_is_seconds_or_a_duration() {
        assert_eq!(ttl_seconds("90"), Ok(90));
        assert_eq!(ttl_seconds("30m"), Ok(1800));
        assert_eq!(ttl_seconds("8h"), Ok(28_800));
        assert!(ttl_seconds("0").is_err());
        assert!(ttl_seconds("soon").is_err());
    }

    #[test]
    fn leases_and_grants_say_whether_they_still_count() {
        let now = "2030-01-01T00:00:00.000Z";
        assert_eq!(
            state(&json!({"expires_at": "2031-01-01T00:00:00.000Z"}), now),
            "live"
        );
        assert_eq!(
            state(&json!({"expires_at": "2029-01-01T00:00:00.000Z"}), now),
            "expired"
        );
        assert_eq!(state(&json!({"expires_at": null}), now), "live");
        assert_eq!(
            state(
                &json!({"revoked_at": "2029-01-01T00:00:00.000Z", "expires_at": "2031-01-01T00:00:00.000Z"}),
                now
            ),
            "revoked"
        );
        assert_eq!(
            state(
                &json!({"expires_at": "2031-01-01T00:00:00.000Z", "uses_left": 0}),
                now
            ),
            "used"
        );
    }
}
