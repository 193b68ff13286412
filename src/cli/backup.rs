//! `acp admin backup FILE` and `acp admin restore FILE`: a consistent copy of the SQLite database while the
//! servers run, and putting one back while they are stopped (the file work is in
//! `store::backup`). Postgres is backed up with `pg_dump` (docs/operations.md).
//!
//! A backup holds the vault's values and the JWT signing keys sealed with the master key, which
//! is not in it: restore checks that the configured master key opens every sealed key of the
//! backup before it replaces anything.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::config::{SecretSetting, Settings};
use crate::secret::MasterKey;
use crate::store::backup::{self, Contents, SealedKeys};

use super::output::{line, OutputArg};
use super::DatabaseArgs;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The copy is made while servers keep running (SQLite's VACUUM INTO, one consistent snapshot), checked, and renamed into place. It is useless without the master key (ACP_MASTER_KEY or the key file acp-master.key beside the database): keep that backed up apart from the database. Postgres: see docs/operations.md (pg_dump)."
)]
pub struct BackupArgs {
    /// The backup file to write (a new file, unless --force), outside the database's folder
    pub file: PathBuf,
    /// Replace FILE if it exists
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(flatten)]
    pub output: OutputArg,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Stop every server on the database first: restore refuses while one uses it. The backup is checked (an acp database, intact, not newer than this acp, its sealed keys opened by the master key) before anything changes; the replaced database is kept as DB.before-restore-TIMESTAMP unless --no-keep. An older backup is migrated by the server when it starts."
)]
pub struct RestoreArgs {
    /// The backup file to restore (made by `acp admin backup`)
    pub file: PathBuf,
    /// Do not keep the replaced database (by default it stays as DB.before-restore-TIMESTAMP)
    #[arg(long)]
    pub no_keep: bool,
    /// The servers' master key (32 bytes, standard base64), which must open the backup's sealed
    /// keys [default with SQLite: the key file `acp-master.key` next to the database]
    #[arg(long, env = "ACP_MASTER_KEY", hide_env_values = true)]
    pub master_key: Option<SecretSetting>,
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(flatten)]
    pub output: OutputArg,
}

/// `1.4 MiB`, `812 KiB`, `96 bytes`.
fn size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b >= KIB * KIB * KIB {
        format!("{:.1} GiB", b / (KIB * KIB * KIB))
    } else if b >= KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else if b >= KIB {
        format!("{:.0} KiB", b / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

const MASTER_KEY_NOTE: &str = "The vault's values and the JWT signing keys in it are sealed with the master key, which is not in the backup: keep the key (ACP_MASTER_KEY, or the file acp-master.key beside the database) backed up apart from it. Without the same key a restored database serves no sealed data.";

pub async fn backup(args: &BackupArgs) -> anyhow::Result<i32> {
    let config = args.db.resolve(Settings::default())?;
    let db = backup::sqlite_database_path(&config.database_url)?;
    let made = backup::backup(&db, &args.file, args.force).await?;
    if args.output.json() {
        line(json!({
            "ok": true,
            "file": args.file.display().to_string(),
            "database": db.display().to_string(),
            "bytes": made.bytes,
            "audit_events": made.audit_events,
            "schema_version": made.schema_version,
            "needs_master_key": true,
        }))?;
    } else {
        line(format!(
            "Backed up `{}` to `{}`: {}, {} audit event(s), schema version {}.",
            db.display(),
            args.file.display(),
            size(made.bytes),
            made.audit_events,
            made.schema_version
        ))?;
        line(MASTER_KEY_NOTE)?;
    }
    Ok(0)
}

/// How many sealed keys `master` opened; an error naming the first it does not open.
fn check_master_key(
    master: &MasterKey,
    sealed: &SealedKeys,
    file: &Path,
) -> anyhow::Result<(usize, usize)> {
    let refuse = |what: String| {
        anyhow::anyhow!(
            "the master key does not open {what} in `{}`: restore with the master key the backup was made \
             under (--master-key, ACP_MASTER_KEY, or its acp-master.key beside the database); if the key was \
             rotated since, restore with the old one and then run `acp admin vault rewrap --from-key OLD_KEY` with \
             the new one configured. Nothing was changed",
            file.display()
        )
    };
    if let Some(first) = crate::vault::sets::unopened(master, sealed)
        .into_iter()
        .next()
    {
        return Err(refuse(first));
    }
    Ok((sealed.signing_keys.len(), sealed.data_keys.len()))
}

pub async fn restore(args: &RestoreArgs) -> anyhow::Result<i32> {
    let config = args.db.resolve(Settings {
        master_key: args.master_key.clone(),
        ..Settings::default()
    })?;
    let db = backup::sqlite_database_path(&config.database_url)?;
    let master = crate::app::existing_master_key(&config).map_err(|e| {
        anyhow::anyhow!(
            "{e:#}; restore checks that the master key opens the backup's sealed keys: pass the key the \
             backup was made under (--master-key or ACP_MASTER_KEY), or put its acp-master.key beside \
             the database"
        )
    })?;
    let prepared = backup::prepare_restore(&db, &args.file).await?;
    let (signing_keys, data_keys) =
        check_master_key(&master, &prepared.contents.sealed, &args.file)?;
    let contents: Contents = prepared.contents.clone();
    let restored = prepared.place(!args.no_keep).await?;
    let known = backup::sqlite_schema_version();
    let kept = restored.kept.as_ref().map(|p| p.display().to_string());
    if args.output.json() {
        line(json!({
            "ok": true,
            "file": args.file.display().to_string(),
            "database": db.display().to_string(),
            "bytes": contents.bytes,
            "audit_events": contents.audit_events,
            "schema_version": contents.schema_version,
            "current_schema_version": known,
            "signing_keys_checked": signing_keys,
            "vault_data_keys_checked": data_keys,
            "kept": kept,
        }))?;
        return Ok(0);
    }
    line(format!(
        "Restored `{}` into `{}`: {}, {} audit event(s), schema version {}.",
        args.file.display(),
        db.display(),
        size(contents.bytes),
        contents.audit_events,
        contents.schema_version
    ))?;
    line(format!(
        "The master key opens its {signing_keys} JWT signing key(s) and {data_keys} vault data key(s)."
    ))?;
    match &kept {
        Some(kept) => line(format!("The replaced database is kept as `{kept}`."))?,
        None if args.no_keep => line("The replaced database was not kept (--no-keep).")?,
        None => {}
    }
    if contents.schema_version < known {
        line(format!(
            "Start the server with the same master key: it migrates the database from schema version {} to {known}.",
            contents.schema_version
        ))?;
    } else {
        line("Start the server with the same master key.")?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(96), "96 bytes");
        assert_eq!(size(812 * 1024), "812 KiB");
        assert_eq!(size(3 * 1024 * 1024 / 2), "1.5 MiB");
        assert_eq!(size(5 * 1024 * 1024 * 1024), "5.0 GiB");
    }

    #[test]
    fn a_backup_sealed_under_another_key_is_refused() {
        let sealed_with = MasterKey::generate();
        let sealed = SealedKeys {
            signing_keys: vec![("kid_1".into(), sealed_with.seal(b"seed", "kid_1").unwrap())],
            data_keys: Vec::new(),
            sink_secrets: Vec::new(),
        };
        let file = Path::new("b.db");
        assert_eq!(
            check_master_key(&sealed_with, &sealed, file).unwrap(),
            (1, 0)
        );
        let err = check_master_key(&MasterKey::generate(), &sealed, file).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("does not open the JWT signing key `kid_1`"),
            "{text}"
        );
        assert!(text.contains("Nothing was changed"), "{text}");
        // Bound to its kid: the right key under another name does not open either.
        let moved = SealedKeys {
            signing_keys: vec![("kid_2".into(), sealed.signing_keys[0].1.clone())],
            data_keys: Vec::new(),
            sink_secrets: Vec::new(),
        };
        assert!(check_master_key(&sealed_with, &moved, file).is_err());
        // An audit sink's secret is checked too.
        let context = crate::audit::delivery::secret_context("snk_1");
        let sink = SealedKeys {
            signing_keys: Vec::new(),
            data_keys: Vec::new(),
            sink_secrets: vec![(
                "snk_1".into(),
                sealed_with.seal(b"whsec_x", &context).unwrap(),
            )],
        };
        assert!(check_master_key(&sealed_with, &sink, file).is_ok());
        let err = check_master_key(&MasterKey::generate(), &sink, file).unwrap_err();
        assert!(
            err.to_string()
                .contains("the signing secret of audit sink `snk_1`"),
            "{err}"
        );
    }
}
