//! The logins of `acp login`, one per server, in a file only its user may read (mode 0600 in a
//! directory of mode 0700), as `gh` and `vault` keep theirs. The file holds personal access
//! tokens: it is written whole to a temporary file and renamed, so a crash never leaves half of
//! it, and a file others can read is refused rather than used.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// Every stored login, and the server the last login was to.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Credentials {
    /// The server client commands use without `--server`.
    #[serde(default)]
    pub current: Option<String>,
    #[serde(default)]
    pub servers: BTreeMap<String, Login>,
}

/// A login to one server: the token `acp login` made, and the workspace `acp workspaces use`
/// picked.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Login {
    pub token: String,
    pub token_id: String,
    pub email: String,
    pub user_id: String,
    pub expires_at: String,
    #[serde(default)]
    pub workspace: Option<String>,
}

impl Credentials {
    /// `$XDG_CONFIG_HOME/acp/credentials.json`, else `$HOME/.config/acp/credentials.json`.
    pub fn default_path() -> anyhow::Result<PathBuf> {
        let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => {
                let home = std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .context("neither XDG_CONFIG_HOME nor HOME is set: pass --credentials PATH")?;
                PathBuf::from(home).join(".config")
            }
        };
        Ok(base.join("acp").join("credentials.json"))
    }

    /// The stored logins; none when the file does not exist.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        check_private(path)?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a credentials file of acp", path.display()))
    }

    /// Writes the file (mode 0600, its directory 0700) by replacing it whole.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        create_private_dir(dir)?;
        let tmp = path.with_extension("json.tmp");
        let mut file =
            private_file(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        file.write_all(serde_json::to_string_pretty(self)?.as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    }
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.exists() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

#[cfg(unix)]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // A file left by an earlier run keeps its mode through `open`: set it.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

#[cfg(not(unix))]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::create(path)
}

/// Refuses a credentials file that its group or others may read or write.
#[cfg(unix)]
fn check_private(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode();
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "{} may be read by others (mode {:o}): run `chmod 600 {}` or log in again",
            path.display(),
            mode & 0o777,
            path.display()
        );
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_: &Path) -> anyhow::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_logins_are_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("credentials.json");
        let mut creds = Credentials {
            current: Some("http://127.0.0.1:1".into()),
            ..Default::default()
        };
        creds.servers.insert(
            "http://127.0.0.1:1".into(),
            Login {
                token: "svc_pat_x".into(),
                token_id: "pat_1".into(),
                email: "a@example.com".into(),
                user_id: "usr_1".into(),
                expires_at: "2027-01-01T00:00:00.000Z".into(),
                workspace: None,
            },
        );
        creds.save(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&path), 0o600);
            assert_eq!(mode(path.parent().unwrap()), 0o700);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let err = Credentials::load(&path).unwrap_err().to_string();
            assert!(err.contains("may be read by others"), "{err}");
            creds.save(&path).unwrap();
            assert_eq!(mode(&path), 0o600);
        }
        let back = Credentials::load(&path).unwrap();
        assert_eq!(back.servers["http://127.0.0.1:1"].token, "svc_pat_x");
        assert!(Credentials::load(&dir.path().join("none.json"))
            .unwrap()
            .servers
            .is_empty());
    }
}
