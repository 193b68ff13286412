//! The agent's side from a terminal, so that nobody writes a program to get a first agent:
//! `acp agents new` makes one (an Ed25519 key pair made here, registered and attested) and
//! writes its key file; `acp agents heartbeat` signs a heartbeat with that file. Also the
//! `acp agents` command itself: these two beside the day-two commands of `operate.rs`.
//!
//! The key file is JSON with exactly `agent_id`, `private_key` (standard base64 of the PKCS#8
//! DER of the Ed25519 key), `public_key` (standard base64 of the raw 32 bytes) and `server`
//! (the base URL), the file the Python and TypeScript clients read too. It is created with
//! `O_EXCL` and mode 0600 (never readable by others, not even for a moment), reserved before
//! anything is registered and filled in as soon as the server knows the agent, so that a key
//! of a registered agent is never lost and a file never names no agent.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use clap::Subcommand;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use ed25519_dalek::{Signer, SigningKey};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::identity::signing::canonical_string;
use crate::secret::{random_base62, sha256_hex};

use super::check::connect_with_key;
use super::client::{answer, cell, finish, normalize, print_json, ClientArgs, Failure};
use super::operate::{self, AgentsCommand};
use super::output::{eline, line};

#[derive(Debug, clap::Args)]
pub struct AgentsArgs {
    #[command(subcommand)]
    pub command: AgentsCli,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum AgentsCli {
    #[command(flatten)]
    Manage(AgentsCommand),
    /// Make an agent: a new Ed25519 key pair, registered in the workspace and attested (it is
    /// `active` at once); writes its key file (mode 0600) and prints its id
    New(NewArgs),
    /// Send a heartbeat signed with an agent's key file (the agent's side)
    Heartbeat(HeartbeatArgs),
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The key file is JSON: {\"agent_id\", \"private_key\" (base64 PKCS#8 DER), \"public_key\" (base64 of the raw 32 bytes), \"server\"}; the Python and TypeScript clients read it too. An existing file is never overwritten.\nExit codes: 0 the agent is active, 1 any error (the file exists, bad input, the server unreachable), 4 the credential is not valid, 5 refused by role or scope."
)]
pub struct NewArgs {
    /// The agent's name
    pub name: String,
    /// Where to write the agent's key (created with mode 0600; refused if it exists)
    #[arg(long, value_name = "FILE")]
    pub key_file: PathBuf,
    /// An inventory label `key=value` (repeat for more), as policies select agents by them
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// A workspace API key to register with [default: --token, else the stored login (an
    /// owner or admin)]
    #[arg(long, env = "ACP_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Signs `POST /v1/telemetry/heartbeat` with the agent's key; the server is the key file's unless --server is given.\nExit codes: 0 recorded, 1 any error, 4 the signature was refused, 5 the agent is not active, 6 unknown agent."
)]
pub struct HeartbeatArgs {
    /// The agent's key file (from `acp agents new`)
    #[arg(long, value_name = "FILE")]
    pub key_file: PathBuf,
    /// The agent's status: `ok`, `degraded`, `error`, ...
    #[arg(long, default_value = "ok")]
    pub status: String,
    /// The latency to report, milliseconds
    #[arg(long, default_value_t = 0.0)]
    pub latency_ms: f64,
}

/// `key=value`, both non-empty.
fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
            Ok((k.trim().to_owned(), v.trim().to_owned()))
        }
        _ => Err(format!("`{text}` is not a label `key=value`")),
    }
}

/// An agent's key file, as written and read.
#[derive(Debug, Serialize, Deserialize)]
pub struct KeyFile {
    pub agent_id: String,
    /// Standard base64 of the PKCS#8 DER of the Ed25519 key.
    pub private_key: String,
    /// Standard base64 of the raw 32-byte public key.
    pub public_key: String,
    /// The server's base URL.
    pub server: String,
}

impl KeyFile {
    fn new(agent_id: &str, key: &SigningKey, server: &str) -> anyhow::Result<KeyFile> {
        // PKCS#8 v1 (the private key only), the form every library reads.
        let der = ed25519_dalek::pkcs8::KeypairBytes {
            secret_key: key.to_bytes(),
            public_key: None,
        }
        .to_pkcs8_der()
        .map_err(|e| anyhow::anyhow!("cannot encode the key: {e}"))?;
        Ok(KeyFile {
            agent_id: agent_id.to_owned(),
            private_key: STANDARD.encode(der.as_bytes()),
            public_key: STANDARD.encode(key.verifying_key().as_bytes()),
            server: server.to_owned(),
        })
    }

    /// Reads a key file; one others may read, or whose keys do not match, is refused.
    pub fn read(path: &Path) -> anyhow::Result<(KeyFile, SigningKey)> {
        let bad = |why: String| Failure::local(1, format!("{}: {why}", path.display()));
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("cannot read the key file: {e}")))?;
        check_private(path).map_err(bad)?;
        let file: KeyFile =
            serde_json::from_str(&text).map_err(|e| bad(format!("not an agent key file: {e}")))?;
        let der = STANDARD
            .decode(file.private_key.trim())
            .map_err(|_| bad("`private_key` is not base64".into()))?;
        let key = SigningKey::from_pkcs8_der(&der)
            .map_err(|e| bad(format!("`private_key` is not a PKCS#8 Ed25519 key: {e}")))?;
        if STANDARD.encode(key.verifying_key().as_bytes()) != file.public_key.trim() {
            return Err(bad("`public_key` is not the public half of `private_key`".into()).into());
        }
        Ok((file, key))
    }
}

/// Refuses a key file its group or others may read or write.
#[cfg(unix)]
fn check_private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| e.to_string())?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "the key file may be read by others (mode {:o}): run `chmod 600 {}`",
            mode & 0o777,
            path.display()
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_: &Path) -> Result<(), String> {
    Ok(())
}

/// Creates `path` for this agent's key only: never over an existing file (`O_EXCL`), and
/// readable by its owner only from the moment it exists (mode 0600 at creation).
fn reserve(path: &Path) -> anyhow::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path).map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
            "it exists; an existing key file is never overwritten: choose another --key-file"
                .to_owned()
        } else {
            e.to_string()
        };
        Failure::local(1, format!("cannot create {}: {why}", path.display())).into()
    })
}

/// Writes the agent's key into its reserved file, durably.
fn fill(mut file: std::fs::File, content: &KeyFile) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(content)?;
    text.push('\n');
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    Ok(())
}

pub async fn agents(args: &AgentsArgs) -> anyhow::Result<i32> {
    match &args.command {
        AgentsCli::Manage(command) => {
            operate::agents(&operate::AgentsArgs {
                command: command.clone(),
                client: args.client.clone(),
            })
            .await
        }
        AgentsCli::New(new) => finish(make_agent(new, &args.client).await, args.client.json()),
        AgentsCli::Heartbeat(beat) => {
            finish(heartbeat(beat, &args.client).await, args.client.json())
        }
    }
}

async fn make_agent(args: &NewArgs, client_args: &ClientArgs) -> anyhow::Result<i32> {
    let client = connect_with_key(client_args, args.api_key.as_deref())?;
    let name = args.name.trim();
    if name.is_empty() {
        return Err(Failure::local(1, "the agent's name must not be empty").into());
    }
    let file = reserve(&args.key_file)?;
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let registered = client
        .post(
            "/v1/agents/register",
            &json!({
                "name": name,
                "public_key": STANDARD.encode(key.verifying_key().as_bytes()),
                "key_type": "ed25519",
                "metadata": {"created_by": "acp agents new"},
            }),
        )
        .await;
    let registered = match registered {
        Ok(r) => r,
        Err(err) => {
            // Nothing was registered: the reserved file names no agent, so it goes.
            drop(file);
            let _ = std::fs::remove_file(&args.key_file);
            return Err(err);
        }
    };
    let agent_id = registered["agent_id"].as_str().unwrap_or("").to_owned();
    // The server knows the agent from here on: its key is kept whatever happens next.
    fill(file, &KeyFile::new(&agent_id, &key, &client.server)?).with_context(|| {
        format!(
            "agent {agent_id} is registered (pending) but its key could not be written to {}",
            args.key_file.display()
        )
    })?;
    let challenge = STANDARD
        .decode(registered["challenge"].as_str().unwrap_or(""))
        .unwrap_or_default();
    let attested = client
        .post(
            "/v1/agents/attest",
            &json!({
                "agent_id": agent_id,
                "challenge_id": registered["challenge_id"],
                "signature": STANDARD.encode(key.sign(&challenge).to_bytes()),
            }),
        )
        .await;
    if let Err(err) = attested {
        eline(format!(
            "agent {agent_id} is registered but not attested (it stays pending); its key is in {}. `acp agents approve {agent_id}` vouches for it, `acp agents revoke {agent_id}` removes it.",
            args.key_file.display()
        ))?;
        return Err(err);
    }
    if !args.labels.is_empty() {
        let labels: serde_json::Map<String, Value> = args
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let labelled = client
            .post(
                "/v1/workspace/agents/upsert",
                &json!({
                    "external_agent_key": agent_id,
                    "agent_id": agent_id,
                    "display_name": name,
                    "labels": labels,
                    "source": "acp agents new",
                }),
            )
            .await;
        if let Err(err) = labelled {
            eline(format!(
                "agent {agent_id} is active (its key is in {}), but its labels were not set",
                args.key_file.display()
            ))?;
            return Err(err);
        }
    }
    let labels: serde_json::Map<String, Value> = args
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    if client_args.json() {
        print_json(&json!({
            "ok": true,
            "agent_id": agent_id,
            "name": name,
            "status": "active",
            "key_file": args.key_file,
            "server": client.server,
            "labels": labels,
        }))?;
    } else {
        // The id alone on stdout (for `$(...)`), the rest on stderr.
        line(&agent_id)?;
        eline(format!(
            "agent {name} ({agent_id}) is active; its key is in {} (mode 0600): keep it secret",
            args.key_file.display()
        ))?;
    }
    Ok(0)
}

/// The headers of a request the agent signs: `METHOD\nPATH\nTIMESTAMP\nNONCE\nSHA256(body)`.
pub fn signed_headers(
    key: &SigningKey,
    agent_id: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let timestamp = crate::time::now_ms().to_string();
    let nonce = random_base62(32);
    let canonical = canonical_string(method, path, &timestamp, &nonce, &sha256_hex(body));
    let signature = STANDARD.encode(key.sign(canonical.as_bytes()).to_bytes());
    vec![
        ("X-Service-Agent-Id", agent_id.to_owned()),
        ("X-Service-Timestamp", timestamp),
        ("X-Service-Nonce", nonce),
        ("X-Service-Signature", signature),
    ]
}

async fn heartbeat(args: &HeartbeatArgs, client_args: &ClientArgs) -> anyhow::Result<i32> {
    let (file, key) = KeyFile::read(&args.key_file)?;
    let server = normalize(client_args.server.as_deref().unwrap_or(&file.server));
    let path = "/v1/telemetry/heartbeat";
    let body = serde_json::to_vec(&json!({
        "agent_id": file.agent_id,
        "status": args.status,
        "latency_ms": args.latency_ms,
    }))?;
    let mut request = reqwest::Client::new()
        .post(format!("{server}{path}"))
        .header(reqwest::header::CONTENT_TYPE, "application/json");
    for (name, value) in signed_headers(&key, &file.agent_id, "POST", path, &body) {
        request = request.header(name, value);
    }
    let sent = request
        .body(body)
        .send()
        .await
        .with_context(|| format!("cannot reach the acp server at {server}"))?;
    let recorded = answer(sent).await?;
    if client_args.json() {
        print_json(&recorded)?;
    } else {
        line(format!(
            "heartbeat of {} recorded at {} (status {})",
            file.agent_id,
            cell(&recorded["recorded_at"]),
            cell(&recorded["status"])
        ))?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_reads_back_and_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.json");
        let key = SigningKey::generate(&mut rand::rngs::OsRng);
        let file = reserve(&path).unwrap();
        fill(
            file,
            &KeyFile::new("agt_x", &key, "http://127.0.0.1:1").unwrap(),
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let keys: Vec<String> = serde_json::from_str::<serde_json::Map<String, Value>>(&text)
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["agent_id", "private_key", "public_key", "server"]);
        let (back, read) = KeyFile::read(&path).unwrap();
        assert_eq!(back.agent_id, "agt_x");
        // PKCS#8 v1 of an Ed25519 key: 48 bytes, the seed in the last 32.
        let der = STANDARD.decode(&back.private_key).unwrap();
        assert_eq!(der.len(), 48);
        assert_eq!(der[16..], key.to_bytes());
        assert_eq!(read.to_bytes(), key.to_bytes());
        assert!(reserve(&path).is_err(), "an existing file is never reused");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(
                KeyFile::read(&path).is_err(),
                "a readable key file is refused"
            );
        }
        assert_eq!(parse_label("dept=finance").unwrap().1, "finance");
        assert!(parse_label("dept").is_err() && parse_label("=x").is_err());
    }
}
