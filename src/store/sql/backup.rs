//! Backup and restore of an SQLite database, as files: `VACUUM INTO` a temporary file beside
//! the backup (one read transaction, so a consistent snapshot while the server writes in WAL
//! mode), checked and renamed into place; and the reverse, a backup copied beside the database,
//! checked, and renamed over it once no process uses the database.
//!
//! "No process uses it" is a lock file beside the database (`acp.db-lock`): every process that
//! opens the SQLite store holds a shared lock on it for as long as it runs (two servers may share
//! one file), and a restore takes it exclusively. `flock` locks go with their process, so a
//! crashed server leaves no stale lock behind.
//!
//! Postgres has `pg_dump` for this (docs/operations.md); these functions refuse its URLs.

use std::fs::{self, File, TryLockError};
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection, Row};

use super::{sqlite_file, SQLITE_MIGRATIONS};

/// Why a backup or a restore did not happen. Messages are one line, lowercase, paths in
/// backticks; what to do next is part of them.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(
        "`acp admin backup` and `acp admin restore` copy SQLite databases; back up Postgres with `pg_dump` and \
         restore it with `pg_restore` as docs/operations.md (Backup and restore) describes"
    )]
    NotSqlite,
    #[error("no database at `{0}` (start `acp serve` first or pass --database-url)")]
    NoDatabase(PathBuf),
    #[error("no backup at `{0}`")]
    NoBackup(PathBuf),
    #[error(
        "another program is reading `{0}` (its write-ahead log could not be folded in): stop it, \
         then restore. Nothing was changed"
    )]
    LogBusy(PathBuf),
    #[error("`{0}` exists: pass --force to replace it")]
    Exists(PathBuf),
    #[error("`{0}` is a folder: name the backup file, for example `{0}/acp-backup.db`")]
    IsFolder(PathBuf),
    #[error("the folder of `{0}` does not exist")]
    NoFolder(PathBuf),
    #[error("`{0}` is the database itself: name another file")]
    SameFile(PathBuf),
    #[error(
        "`{dest}` is `{file}`, a file of the live database: name a file outside the database's \
         folder"
    )]
    DatabaseFile { dest: PathBuf, file: PathBuf },
    #[error(
        "`{dest}` is inside the database's folder `{folder}`: write backups outside it (a file \
         there can be taken for, or replace, one of the database's own)"
    )]
    InDataFolder { dest: PathBuf, folder: PathBuf },
    #[error("`{0}` is not an SQLite database")]
    NotADatabase(PathBuf),
    #[error("`{0}` is an SQLite database but not one of acp (it has no migrations table)")]
    NotAcp(PathBuf),
    #[error("`{0}` fails SQLite's integrity check: {1}")]
    Corrupt(PathBuf, String),
    #[error(
        "`{path}` has schema version {found}, newer than this acp's {known}: restore it with the \
         acp release that made it (or a later one)"
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error(
        "`{path}` has migration {version} applied, which this acp does not know (a build from \
         another branch?): restore it with the acp release that made it"
    )]
    UnknownMigration { path: PathBuf, version: i64 },
    #[error(
        "`{path}` has migration {version} half applied: it is no consistent database to restore"
    )]
    UnfinishedMigration { path: PathBuf, version: i64 },
    #[error(
        "`{0}-wal` is beside `{0}`: it is a live database with a write-ahead log, not a backup \
         (make one with `acp admin backup`)"
    )]
    LiveDatabase(PathBuf),
    #[error(
        "the database `{db}` is in use (`acp serve` or another acp command holds `{lock}`): stop \
         every server on it, then restore"
    )]
    InUse { db: PathBuf, lock: PathBuf },
    #[error(
        "the database `{db}` is being restored (`acp admin restore` holds `{lock}`): try again when it \
         has finished"
    )]
    Restoring { db: PathBuf, lock: PathBuf },
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}: {1}")]
    Sql(String, sqlx::Error),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BackupError {
    let what = what.into();
    move |e| BackupError::Io(what, e)
}

fn sql(what: impl Into<String>) -> impl FnOnce(sqlx::Error) -> BackupError {
    let what = what.into();
    move |e| BackupError::Sql(what, e)
}

/// The file of an SQLite database URL; Postgres (and in-memory databases) are refused.
pub fn sqlite_database_path(url: &str) -> Result<PathBuf, BackupError> {
    sqlite_file(url)
        .map(|(path, _)| PathBuf::from(path))
        .ok_or(BackupError::NotSqlite)
}

/// The newest schema version this build's SQLite migrations make.
pub fn sqlite_schema_version() -> i64 {
    SQLITE_MIGRATIONS
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap_or(0)
}

/// `PATH` + `suffix` (`acp.db` + `-wal`).
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The lock file of the database at `db`.
pub fn lock_path(db: &Path) -> PathBuf {
    beside(db, "-lock")
}

/// A lock on a database's lock file, released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DatabaseLock {
    _file: File,
}

fn open_lock_file(db: &Path) -> Result<(File, PathBuf), BackupError> {
    let path = lock_path(db);
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io(format!(
            "cannot open the lock file `{}`",
            path.display()
        )))?;
    Ok((file, path))
}

/// The lock every process using the database holds: shared, so that servers can share a file;
/// refused while a restore holds it exclusively.
pub fn lock_shared(db: &Path) -> Result<DatabaseLock, BackupError> {
    let (file, lock) = open_lock_file(db)?;
    match file.try_lock_shared() {
        Ok(()) => Ok(DatabaseLock { _file: file }),
        Err(TryLockError::WouldBlock) => Err(BackupError::Restoring {
            db: db.to_owned(),
            lock,
        }),
        Err(TryLockError::Error(e)) => Err(BackupError::Io(
            format!("cannot lock `{}`", lock.display()),
            e,
        )),
    }
}

/// The restore's lock: exclusive, refused while any process holds the shared one.
pub fn lock_exclusive(db: &Path) -> Result<DatabaseLock, BackupError> {
    let (file, lock) = open_lock_file(db)?;
    match file.try_lock() {
        Ok(()) => Ok(DatabaseLock { _file: file }),
        Err(TryLockError::WouldBlock) => Err(BackupError::InUse {
            db: db.to_owned(),
            lock,
        }),
        Err(TryLockError::Error(e)) => Err(BackupError::Io(
            format!("cannot lock `{}`", lock.display()),
            e,
        )),
    }
}

/// A temporary file removed when dropped, unless it was put in place.
struct TempFile {
    path: PathBuf,
    armed: bool,
}

impl TempFile {
    /// A fresh name for a temporary file beside `target` (in the same folder, so that a rename
    /// moves it into place atomically).
    fn beside(target: &Path, what: &str) -> TempFile {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "acp.db".to_owned());
        let path = folder_of(target).join(format!(
            ".{name}.{what}-{}-{}.tmp",
            std::process::id(),
            crate::secret::random_base62(8)
        ));
        TempFile { path, armed: true }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The folder a path is in (`.` for a bare file name).
fn folder_of(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Flushes a file's data to the disk.
fn sync_file(path: &Path) -> Result<(), BackupError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(format!("cannot sync `{}`", path.display())))
}

/// Makes the renames and links of a folder durable.
fn sync_folder(path: &Path) -> Result<(), BackupError> {
    let folder = folder_of(path);
    File::open(&folder)
        .and_then(|f| f.sync_all())
        .map_err(io(format!("cannot sync the folder `{}`", folder.display())))
}

/// The files of a live SQLite database: the database, its write-ahead log, the log's index and
/// acp's lock file (as suffixes of the database's path).
const DATABASE_FILES: [&str; 4] = ["", "-wal", "-shm", "-lock"];

/// `(device, inode)` of an existing file, following links.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Refuses a backup target that is the database at `db`, one of its live files or anything
/// else in its folder, however it is spelled (`./`, `../`, a symbolic link to the file or to a
/// folder, a hard link): the target's real path (for a file not there yet, its folder's real
/// path and its name) must lie outside the database's real folder, and an existing target
/// must be none of the database's files under another name. Replacing the write-ahead log
/// under a running server loses acknowledged writes; replacing the lock file lets a restore
/// run beside it.
fn outside_the_database(db: &Path, dest: &Path) -> Result<(), BackupError> {
    let real =
        |p: &Path| fs::canonicalize(p).map_err(io(format!("cannot resolve `{}`", p.display())));
    let db_real = real(db)?;
    let target = match fs::canonicalize(dest) {
        Ok(path) => path,
        // Not there yet, or a dangling link (which the rename replaces, never follows).
        Err(_) => real(&folder_of(dest))?.join(dest.file_name().unwrap_or_default()),
    };
    let target_id = file_id(dest);
    for suffix in DATABASE_FILES {
        let (file, real_file) = (beside(db, suffix), beside(&db_real, suffix));
        let same_inode =
            target_id.is_some() && [&file, &real_file].iter().any(|f| file_id(f) == target_id);
        if target == real_file || same_inode {
            return Err(if suffix.is_empty() {
                BackupError::SameFile(dest.to_owned())
            } else {
                BackupError::DatabaseFile {
                    dest: dest.to_owned(),
                    file,
                }
            });
        }
    }
    // The folder of the database's real file, and of the path it is named by (its lock file
    // is there when that path is a link).
    for folder in [folder_of(&db_real), real(&folder_of(db))?] {
        if target.starts_with(&folder) {
            return Err(BackupError::InDataFolder {
                dest: dest.to_owned(),
                folder,
            });
        }
    }
    Ok(())
}

/// True when `a` and `b` name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Refuses anything that does not start as an SQLite database file does.
fn check_header(path: &Path) -> Result<(), BackupError> {
    let mut header = [0u8; 16];
    let mut file = File::open(path).map_err(io(format!("cannot read `{}`", path.display())))?;
    match file.read_exact(&mut header) {
        Ok(()) if &header == b"SQLite format 3\0" => Ok(()),
        Ok(()) => Err(BackupError::NotADatabase(path.to_owned())),
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
            Err(BackupError::NotADatabase(path.to_owned()))
        }
        Err(e) => Err(BackupError::Io(
            format!("cannot read `{}`", path.display()),
            e,
        )),
    }
}

/// The sealed secrets of a database, to check that a master key opens them before it is put in
/// place: the JWT signing keys (sealed with the master key, bound to their kid) and the vault's
/// data keys (sealed with it, bound to their workspace and set).
#[derive(Debug, Default, Clone)]
pub struct SealedKeys {
    /// `(kid, sealed private key)`.
    pub signing_keys: Vec<(String, String)>,
    /// `(workspace_id, secret_set_id, wrapped data key)` of the sets not destroyed.
    pub data_keys: Vec<(String, String, String)>,
    /// `(sink_id, sealed signing secret)` of the audit sinks.
    pub sink_secrets: Vec<(String, String)>,
}

/// What a checked database file holds.
#[derive(Debug, Clone)]
pub struct Contents {
    /// The newest migration applied.
    pub schema_version: i64,
    pub audit_events: i64,
    pub bytes: u64,
    pub sealed: SealedKeys,
}

/// Reads a database file that nobody writes (a backup, or a copy of one) without touching it:
/// `immutable`, so SQLite takes no lock and makes no `-wal` or `-shm` beside it. Checks that it
/// is a whole acp database this build can run; errors name `shown` (the file the user named).
async fn inspect(path: &Path, shown: &Path) -> Result<Contents, BackupError> {
    let bytes = fs::metadata(path)
        .map_err(io(format!("cannot read `{}`", shown.display())))?
        .len();
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .immutable(true)
        .disable_statement_logging()
        .connect()
        .await
        .map_err(|_| BackupError::NotADatabase(shown.to_owned()))?;
    let inspected = inspect_on(&mut conn, shown).await;
    let _ = conn.close().await;
    let mut contents = inspected?;
    contents.bytes = bytes;
    Ok(contents)
}

async fn inspect_on(conn: &mut SqliteConnection, shown: &Path) -> Result<Contents, BackupError> {
    let problems: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| match e.as_database_error() {
            // "file is not a database" (26) and friends: a file with SQLite's header but no
            // database behind it.
            Some(_) => BackupError::Corrupt(shown.to_owned(), e.to_string()),
            None => BackupError::Sql(format!("cannot read `{}`", shown.display()), e),
        })?;
    if problems != ["ok"] {
        let first = problems.first().cloned().unwrap_or_default();
        return Err(BackupError::Corrupt(
            shown.to_owned(),
            format!("{first} ({} problem(s))", problems.len()),
        ));
    }
    let read = || sql(format!("cannot read `{}`", shown.display()));
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN \
         ('_sqlx_migrations', 'audit_events', 'signing_keys', 'vault_secret_sets', 'audit_sinks')",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(read())?;
    let has = |t: &str| tables.iter().any(|n| n == t);
    if !has("_sqlx_migrations") || !has("audit_events") {
        return Err(BackupError::NotAcp(shown.to_owned()));
    }
    let applied = sqlx::query("SELECT version, success FROM _sqlx_migrations ORDER BY version")
        .fetch_all(&mut *conn)
        .await
        .map_err(read())?;
    let known = sqlite_schema_version();
    let mut schema_version = 0;
    for row in &applied {
        let version: i64 = row.try_get("version").map_err(read())?;
        let success: bool = row.try_get("success").map_err(read())?;
        if !success {
            return Err(BackupError::UnfinishedMigration {
                path: shown.to_owned(),
                version,
            });
        }
        schema_version = schema_version.max(version);
    }
    if schema_version > known {
        return Err(BackupError::NewerSchema {
            path: shown.to_owned(),
            found: schema_version,
            known,
        });
    }
    for row in &applied {
        let version: i64 = row.try_get("version").map_err(read())?;
        if !SQLITE_MIGRATIONS.iter().any(|m| m.version == version) {
            return Err(BackupError::UnknownMigration {
                path: shown.to_owned(),
                version,
            });
        }
    }
    let audit_events: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM audit_events")
        .fetch_one(&mut *conn)
        .await
        .map_err(read())?;
    let mut sealed = SealedKeys::default();
    if has("signing_keys") {
        for row in sqlx::query("SELECT kid, private_key FROM signing_keys ORDER BY kid")
            .fetch_all(&mut *conn)
            .await
            .map_err(read())?
        {
            sealed.signing_keys.push((
                row.try_get("kid").map_err(read())?,
                row.try_get("private_key").map_err(read())?,
            ));
        }
    }
    if has("vault_secret_sets") {
        for row in sqlx::query(
            "SELECT workspace_id, id, data_key FROM vault_secret_sets \
             WHERE destroyed_at IS NULL ORDER BY id",
        )
        .fetch_all(&mut *conn)
        .await
        .map_err(read())?
        {
            sealed.data_keys.push((
                row.try_get("workspace_id").map_err(read())?,
                row.try_get("id").map_err(read())?,
                row.try_get("data_key").map_err(read())?,
            ));
        }
    }
    if has("audit_sinks") {
        for row in sqlx::query("SELECT id, secret_sealed FROM audit_sinks ORDER BY id")
            .fetch_all(&mut *conn)
            .await
            .map_err(read())?
        {
            sealed.sink_secrets.push((
                row.try_get("id").map_err(read())?,
                row.try_get("secret_sealed").map_err(read())?,
            ));
        }
    }
    Ok(Contents {
        schema_version,
        audit_events,
        bytes: 0,
        sealed,
    })
}

/// A connection to the live database at `db` (never creating it), waiting out the server's
/// write locks for a while.
async fn connect_live(db: &Path) -> Result<SqliteConnection, BackupError> {
    SqliteConnectOptions::new()
        .filename(db)
        .create_if_missing(false)
        .busy_timeout(Duration::from_secs(30))
        .disable_statement_logging()
        .connect()
        .await
        .map_err(sql(format!("cannot open the database `{}`", db.display())))
}

/// Writes a consistent copy of the SQLite database at `db` to `dest` while servers keep using
/// it, and answers what the copy holds. `dest` is replaced only with `force`; it never holds a
/// partial copy: the copy is made and checked under a temporary name beside it, then renamed.
pub async fn backup(db: &Path, dest: &Path, force: bool) -> Result<Contents, BackupError> {
    if !db.is_file() {
        return Err(BackupError::NoDatabase(db.to_owned()));
    }
    if dest.is_dir() {
        return Err(BackupError::IsFolder(dest.to_owned()));
    }
    if !folder_of(dest).is_dir() {
        return Err(BackupError::NoFolder(dest.to_owned()));
    }
    outside_the_database(db, dest)?;
    if dest.exists() && !force {
        return Err(BackupError::Exists(dest.to_owned()));
    }
    // Shared, as a server's: a backup runs beside servers, never during a restore.
    let _lock = lock_shared(db)?;
    let temp = TempFile::beside(dest, "backup");
    let mut conn = connect_live(db).await?;
    // One read transaction: the copy is the database as of one commit, whatever the servers
    // write meanwhile (WAL readers never block writers).
    let copied = sqlx::query("VACUUM INTO $1")
        .bind(temp.path.to_string_lossy().into_owned())
        .execute(&mut conn)
        .await;
    let _ = conn.close().await;
    copied.map_err(sql(format!(
        "cannot copy `{}` to `{}`",
        db.display(),
        temp.path.display()
    )))?;
    sync_file(&temp.path)?;
    let contents = inspect(&temp.path, &temp.path).await?;
    if force {
        fs::rename(&temp.path, dest).map_err(io(format!(
            "cannot rename `{}` to `{}`",
            temp.path.display(),
            dest.display()
        )))?;
    } else {
        // A link never replaces a file: one made meanwhile is refused, not overwritten.
        match fs::hard_link(&temp.path, dest) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                return Err(BackupError::Exists(dest.to_owned()))
            }
            // A file system without links: check once more and rename.
            Err(_) if !dest.exists() => fs::rename(&temp.path, dest).map_err(io(format!(
                "cannot rename `{}` to `{}`",
                temp.path.display(),
                dest.display()
            )))?,
            Err(e) => {
                return Err(BackupError::Io(
                    format!("cannot write `{}`", dest.display()),
                    e,
                ))
            }
        }
    }
    drop(temp);
    sync_folder(dest)?;
    Ok(contents)
}

/// A backup copied beside the database and checked, with the database locked against every
/// other acp process: [`Prepared::place`] puts it in place; dropping it removes the copy and
/// leaves the database as it was.
pub struct Prepared {
    db: PathBuf,
    temp: TempFile,
    _lock: DatabaseLock,
    pub contents: Contents,
}

/// What a restore did.
#[derive(Debug, Clone)]
pub struct Restored {
    /// Where the replaced database was kept, if there was one and it was kept.
    pub kept: Option<PathBuf>,
}

/// Checks the backup `file` and copies it beside the database `db`, once no process uses the
/// database (refused otherwise). Nothing at `db` changes until [`Prepared::place`].
pub async fn prepare_restore(db: &Path, file: &Path) -> Result<Prepared, BackupError> {
    if !file.is_file() {
        return Err(BackupError::NoBackup(file.to_owned()));
    }
    check_header(file)?;
    if fs::metadata(beside(file, "-wal")).is_ok_and(|m| m.len() > 0) {
        return Err(BackupError::LiveDatabase(file.to_owned()));
    }
    if same_file(db, file) {
        return Err(BackupError::SameFile(file.to_owned()));
    }
    let folder = folder_of(db);
    fs::create_dir_all(&folder).map_err(io(format!("cannot create `{}`", folder.display())))?;
    let lock = lock_exclusive(db)?;
    let temp = TempFile::beside(db, "restore");
    fs::copy(file, &temp.path).map_err(io(format!(
        "cannot copy `{}` to `{}`",
        file.display(),
        temp.path.display()
    )))?;
    sync_file(&temp.path)?;
    // The checks read the copy: what is checked is what is put in place.
    let contents = inspect(&temp.path, file).await?;
    Ok(Prepared {
        db: db.to_owned(),
        temp,
        _lock: lock,
        contents,
    })
}

impl Prepared {
    /// Puts the checked copy in place of the database, keeping the replaced one as
    /// `DB.before-restore-TIMESTAMP` when `keep`. At every moment the database's path holds
    /// either the old database whole or the new one, and never the new one beside the old
    /// one's write-ahead log (SQLite would replay it into the new file):
    ///
    /// 1. the old database's log is checkpointed into it (no process uses it: it is locked);
    /// 2. the old one is linked (or copied) to the kept name, its log too if one was left;
    /// 3. the old `-wal` and `-shm` are removed (the old database is whole without them);
    /// 4. the copy, already synced, is renamed over the database, and the folder synced.
    pub async fn place(self, keep: bool) -> Result<Restored, BackupError> {
        let db = self.db.clone();
        let wal = beside(&db, "-wal");
        let mut kept = None;
        if db.exists() {
            // A damaged database may refuse to open: then its log is kept as it is.
            if let Ok(mut conn) = connect_live(&db).await {
                // Its log is removed below: every committed page must be in the file first. A
                // reader outside acp (the sqlite3 shell, a backup agent) can keep the checkpoint
                // from finishing (`busy`): then nothing is touched.
                let busy = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                    .fetch_optional(&mut conn)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|row| row.try_get::<i64, _>(0).ok())
                    .unwrap_or(0);
                let _ = conn.close().await;
                if busy != 0 {
                    return Err(BackupError::LogBusy(db));
                }
            }
            if keep {
                let target = keep_as(&db)?;
                if fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
                    link_or_copy(&wal, &beside(&target, "-wal"))?;
                }
                kept = Some(target);
            }
            for side in [wal, beside(&db, "-shm"), beside(&db, "-journal")] {
                match fs::remove_file(&side) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(BackupError::Io(
                            format!("cannot remove `{}`", side.display()),
                            e,
                        ))
                    }
                }
            }
        }
        let mut temp = self.temp;
        fs::rename(&temp.path, &db).map_err(io(format!(
            "cannot rename `{}` to `{}`",
            temp.path.display(),
            db.display()
        )))?;
        temp.armed = false;
        sync_folder(&db)?;
        Ok(Restored { kept })
    }
}

/// Keeps the database `db` under a new name, `DB.before-restore-TIMESTAMP` (`-2`, `-3`, ... when
/// restores follow each other within a second): never over an earlier kept one.
fn keep_as(db: &Path) -> Result<PathBuf, BackupError> {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    for n in 1..1000 {
        let suffix = if n == 1 {
            format!(".before-restore-{stamp}")
        } else {
            format!(".before-restore-{stamp}-{n}")
        };
        let target = beside(db, &suffix);
        match link_or_copy(db, &target) {
            Ok(()) => return Ok(target),
            Err(BackupError::Io(_, e)) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(BackupError::Io(
        format!("cannot keep `{}`", db.display()),
        ErrorKind::AlreadyExists.into(),
    ))
}

/// A hard link (the same file under a second name, instant), or a synced copy where the file
/// system has no links. Never replaces `to`: an existing one is an `AlreadyExists` error.
fn link_or_copy(from: &Path, to: &Path) -> Result<(), BackupError> {
    let what = || format!("cannot copy `{}` to `{}`", from.display(), to.display());
    match fs::hard_link(from, to) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => return Err(BackupError::Io(what(), e)),
        Err(_) => {}
    }
    let mut source = File::open(from).map_err(io(what()))?;
    let mut copy = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(io(what()))?;
    std::io::copy(&mut source, &mut copy)
        .and_then(|_| copy.sync_all())
        .map_err(io(what()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_and_memory_urls_are_refused() {
        for url in [
            "postgres://u@h/db",
            "postgresql://u@h/db",
            "sqlite::memory:",
        ] {
            assert!(matches!(
                sqlite_database_path(url),
                Err(BackupError::NotSqlite)
            ));
        }
        assert_eq!(
            sqlite_database_path("sqlite:./data/acp.db?mode=rw").unwrap(),
            PathBuf::from("./data/acp.db")
        );
    }

    #[test]
    fn a_shared_lock_keeps_the_exclusive_one_out_and_the_other_way_round() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("acp.db");
        let one = lock_shared(&db).unwrap();
        let two = lock_shared(&db).unwrap();
        assert!(matches!(
            lock_exclusive(&db),
            Err(BackupError::InUse { .. })
        ));
        drop((one, two));
        let restoring = lock_exclusive(&db).unwrap();
        let err = lock_shared(&db).unwrap_err();
        assert!(matches!(err, BackupError::Restoring { .. }));
        assert!(err.to_string().contains("being restored"), "{err}");
        drop(restoring);
        assert!(lock_shared(&db).is_ok());
    }

    #[test]
    fn only_sqlite_files_pass_the_header_check() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short");
        fs::write(&short, b"SQLite").unwrap();
        let text = dir.path().join("text");
        fs::write(&text, b"not a database, just some text").unwrap();
        let good = dir.path().join("good");
        fs::write(&good, b"SQLite format 3\0 and pages").unwrap();
        assert!(matches!(
            check_header(&short),
            Err(BackupError::NotADatabase(_))
        ));
        assert!(matches!(
            check_header(&text),
            Err(BackupError::NotADatabase(_))
        ));
        assert!(check_header(&good).is_ok());
    }

    #[test]
    fn kept_databases_never_replace_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("acp.db");
        fs::write(&db, "one").unwrap();
        let first = keep_as(&db).unwrap();
        // A new file at the database's path (a link shares the old one's contents).
        fs::remove_file(&db).unwrap();
        fs::write(&db, "two").unwrap();
        let second = keep_as(&db).unwrap();
        assert_ne!(first, second);
        assert_eq!(fs::read_to_string(&first).unwrap(), "one");
        assert_eq!(fs::read_to_string(&second).unwrap(), "two");
        assert!(first.to_string_lossy().contains("acp.db.before-restore-"));
        assert!(matches!(
            link_or_copy(&db, &first),
            Err(BackupError::Io(_, e)) if e.kind() == ErrorKind::AlreadyExists
        ));
    }

    #[test]
    fn the_schema_version_is_the_newest_migration() {
        assert!(sqlite_schema_version() >= 19);
    }
}
