//! Changes in one round trip: a script of statements on SQLite, one statement on Postgres.
//!
//! The general path applies a signed request's change (the vault proxy's decision with its
//! nonce and the lease's use) in six round trips: the version read, `BEGIN`, the nonce's claim,
//! the operation, the audit events, `COMMIT`; a batch of such changes in about four more per
//! change (a savepoint each). On SQLite each is a hop to the connection's own thread (a wake-up
//! each way, 0.1–0.2 ms on a loaded two-core machine: more than the commit's `fsync`), and the
//! writer applies one batch at a time; on Postgres each is a message to the server and back.
//! Here the same writes travel at once, each precondition checked so that the whole batch fails
//! when one does not hold; a failed batch leaves nothing written and is applied the general
//! way, which finds the same failure and answers each change as it always has (stale, replay,
//! the lease's reason), the others committed.
//!
//! - SQLite: one script, `BEGIN IMMEDIATE` to `COMMIT`, for a batch of such changes and the
//!   decisions committed beside them (a verified request's bare nonce claim too), each
//!   precondition a guard statement after the write it checks. sqlx runs a query of several
//!   statements on SQLite, binding anonymous `?` values in order and `$N` values by their
//!   number, which the script relies on (sqlx calls several statements in one query
//!   SQLite-only; the tests in this file fail if it stops taking them).
//! - Postgres: a single change as one `INSERT` of its events with its other writes as writable
//!   common table expressions, each written only if the one before it was, and the events only
//!   if the last one was, else the statement fails (a division by zero) and nothing of it is
//!   kept.

use futures::stream::BoxStream;
use futures::TryStreamExt as _;
use sqlx::any::{AnyQueryResult, AnyRow};
use sqlx::{AnyConnection, Either, Executor as _};

use super::apply::{bind_nonce_claim, nonce_claim_sql};
use super::audit::{
    audit_insert_sql, bind_audit, typed_rows, Enclosed, AUDIT_COLUMNS, AUDIT_COLUMN_NAMES,
    AUDIT_ROWS_PER_INSERT,
};
use super::vault::{bind_lease_use, use_lease_sql};
use super::AnyQuery;
use crate::store::*;

/// What a batch's one round trip writes: its changes (each a version check, a nonce claim or a
/// lease's use, as it has them) and all their events.
struct Shape<'a> {
    changes: &'a [Change],
    events: Vec<&'a AuditRecord>,
}

impl<'a> Shape<'a> {
    /// `None` when the changes do not fit: an operation other than a lease's use, or more
    /// events than one INSERT takes.
    fn of(changes: &'a [Change]) -> Option<Self> {
        if !changes
            .iter()
            .all(|c| matches!(c.op, Op::Nothing) || lease_use(c).is_some())
        {
            return None;
        }
        let events: Vec<&AuditRecord> = changes.iter().flat_map(|c| &c.audit).collect();
        if events.len() > AUDIT_ROWS_PER_INSERT {
            return None;
        }
        Some(Self { changes, events })
    }

    /// The values in the order the text binds them: every event's first, then each change's
    /// version check's, nonce claim's and lease use's, as it has them.
    fn bind<'q>(&self, mut query: AnyQuery<'q>) -> AnyQuery<'q>
    where
        'a: 'q,
    {
        for event in &self.events {
            query = bind_audit(query, event);
        }
        for change in self.changes {
            if let Some(basis) = &change.basis {
                query = query.bind(&basis.workspace_id).bind(basis.version);
            }
            if let Some(claim) = &change.nonce {
                query = bind_nonce_claim(query, claim);
            }
            if let Some(op) = lease_use(change) {
                query = bind_lease_use(query, op);
            }
        }
        query
    }

    /// Every result `Done`, one per change.
    fn done(&self) -> Vec<Result<Applied, StoreError>> {
        self.changes.iter().map(|_| Ok(Applied::Done)).collect()
    }
}

/// The change's lease use, when that is its operation.
fn lease_use(change: &Change) -> Option<&VaultOp> {
    match &change.op {
        Op::Vault(op @ VaultOp::UseLease { .. }) => Some(op),
        _ => None,
    }
}

/// Applies `changes` in one round trip when they fit: `None` when they do not, or when a
/// precondition of one of them failed (nothing written: the caller applies them the general
/// way, which answers each).
pub(super) async fn apply(
    conn: &mut AnyConnection,
    changes: &[Change],
) -> Result<Option<Vec<Result<Applied, StoreError>>>, StoreError> {
    let Some(shape) = Shape::of(changes) else {
        return Ok(None);
    };
    if conn.backend_name() == <sqlx::Sqlite as sqlx::Database>::NAME {
        sqlite(conn, &shape).await
    } else if let ([change], false) = (changes, shape.events.is_empty()) {
        postgres(conn, change, &shape).await
    } else {
        // Postgres applies every write of a statement to the snapshot it started from: two
        // changes of one row (the same lease's uses, the same nonce) in one statement would
        // both report success with one of them applied. A batch goes the general way (its
        // changes committed together measured no faster in one statement).
        Ok(None)
    }
}

/// The error of a failed precondition: SQLite's [`guard`], Postgres's `1 / 0`.
const SQLITE_GUARD: &str = "integer overflow";
const POSTGRES_GUARD: &str = "division by zero";

/// A statement that fails the script unless `condition` holds: SQLite has no `RAISE` outside
/// triggers, but `abs()` of the smallest integer is an "integer overflow" error (documented),
/// and `CASE` evaluates it only when the condition is false.
fn guard(condition: &str) -> String {
    format!("SELECT abs(CASE WHEN {condition} THEN 0 ELSE -9223372036854775808 END)")
}

/// The version check: the workspace's current version (0 before any) is the basis's.
fn version_is(workspace: &str, version: &str) -> String {
    format!(
        "COALESCE((SELECT version FROM workspace_versions WHERE workspace_id = {workspace}), 0) \
         = {version}"
    )
}

async fn sqlite(
    conn: &mut AnyConnection,
    shape: &Shape<'_>,
) -> Result<Option<Vec<Result<Applied, StoreError>>>, StoreError> {
    // The events' values are bound first, anonymously; the numbered values of the statements
    // after them follow.
    let mut bound = shape.events.len() * AUDIT_COLUMNS;
    let mut script = vec!["BEGIN IMMEDIATE".to_owned()];
    if !shape.events.is_empty() {
        script.push(audit_insert_sql(shape.events.len(), true, Enclosed::InTransaction).to_owned());
    }
    for change in shape.changes {
        if change.basis.is_some() {
            let [workspace, version] = numbered(&mut bound);
            script.push(guard(&version_is(&workspace, &version)));
        }
        if change.nonce.is_some() {
            let p: [String; 5] = numbered(&mut bound);
            script.push(nonce_claim_sql(p.each_ref().map(String::as_str), ""));
            script.push(guard("changes() = 1"));
        }
        if lease_use(change).is_some() {
            let p: [String; 5] = numbered(&mut bound);
            script.push(use_lease_sql(p.each_ref().map(String::as_str), ""));
            script.push(guard("changes() = 1"));
        }
    }
    script.push("COMMIT".to_owned());
    let statements = script.len();
    let script = script.join(";\n");

    // Each statement answers one result when it completes: counting them tells which failed.
    let mut completed = 0;
    let failed = {
        let mut results = results_of(conn, shape.bind(sqlx::query(&script)));
        loop {
            match results.try_next().await {
                Ok(Some(Either::Left(_))) => completed += 1,
                Ok(Some(Either::Right(_))) => {}
                Ok(None) => break None,
                Err(err) => break Some(err),
            }
        }
    };
    let Some(err) = failed else {
        if completed == statements {
            return Ok(Some(shape.done()));
        }
        return Err(StoreError::Database(format!(
            "a script of {statements} statements completed {completed}"
        )));
    };
    // Nothing is kept of a failed script (after a failed `BEGIN` nothing is open).
    if let Err(rollback) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
        if !rollback.to_string().contains("no transaction is active") {
            return Err(rollback.into());
        }
    }
    // The `COMMIT` itself failed: its outcome is unknown, as the general path's failed commit,
    // and it is not tried again.
    if completed + 1 == statements {
        return Err(err.into());
    }
    refused(err, SQLITE_GUARD)
}

async fn postgres(
    conn: &mut AnyConnection,
    change: &Change,
    shape: &Shape<'_>,
) -> Result<Option<Vec<Result<Applied, StoreError>>>, StoreError> {
    let mut bound = shape.events.len() * AUDIT_COLUMNS;
    let mut writes = Vec::new();
    // The last write so far: the next one is written only if it was.
    let mut last: Option<&str> = None;
    let after = |last: Option<&str>| {
        last.map(|name| format!("EXISTS (SELECT 1 FROM {name})"))
            .unwrap_or_default()
    };
    if change.basis.is_some() {
        let [workspace, version] = numbered(&mut bound);
        writes.push(format!(
            "fresh AS (SELECT 1 WHERE {})",
            version_is(&workspace, &version)
        ));
        last = Some("fresh");
    }
    if change.nonce.is_some() {
        let p: [String; 5] = numbered(&mut bound);
        let claim = nonce_claim_sql(p.each_ref().map(String::as_str), &after(last));
        writes.push(format!("claimed AS ({claim} RETURNING 1)"));
        last = Some("claimed");
    }
    if lease_use(change).is_some() {
        let p: [String; 5] = numbered(&mut bound);
        let used = use_lease_sql(p.each_ref().map(String::as_str), &after(last));
        writes.push(format!("used AS ({used} RETURNING 1)"));
        last = Some("used");
    }
    let Some(last) = last else {
        return Ok(None);
    };
    // The events, as their own INSERT's values, written only when the last write was: else
    // `1 / 0` fails the statement, and none of its writes is kept.
    let mut values = String::new();
    typed_rows(&mut values, shape.events.len(), AUDIT_COLUMNS, 0, &[2]);
    let columns = AUDIT_COLUMN_NAMES;
    let sql = format!(
        "WITH {} INSERT INTO audit_events ({columns}) SELECT {columns} FROM (VALUES {values}) \
         AS e ({columns}) WHERE (SELECT 1 / COUNT(*) FROM {last}) = 1",
        writes.join(", ")
    );
    match shape.bind(sqlx::query(&sql)).execute(&mut *conn).await {
        Ok(_) => Ok(Some(shape.done())),
        Err(err) => refused(err, POSTGRES_GUARD),
    }
}

/// A failed one-trip write whose statements were all undone: a failed precondition (the
/// database's error `guard`) goes the general way, which says which; another error the
/// database answered goes the same way after a warning (it meets it again or not); an error
/// without the database's answer (the connection lost) leaves the outcome unknown.
fn refused(
    err: sqlx::Error,
    guard: &str,
) -> Result<Option<Vec<Result<Applied, StoreError>>>, StoreError> {
    match err.as_database_error() {
        Some(db) if db.message() == guard => Ok(None),
        Some(_) => {
            tracing::warn!(error = %err, "a change's one-trip write failed");
            Ok(None)
        }
        None => Err(err.into()),
    }
}

/// Each statement's results as the script runs. (A function of its own: one lifetime for the
/// connection and the query, where the executor's generic one is not `Send` inside the async
/// store methods.)
fn results_of<'c>(
    conn: &'c mut AnyConnection,
    query: AnyQuery<'c>,
) -> BoxStream<'c, Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>> {
    conn.fetch_many(query)
}

/// The next `N` numbered placeholders after the `bound` values so far.
fn numbered<const N: usize>(bound: &mut usize) -> [String; N] {
    std::array::from_fn(|_| {
        *bound += 1;
        format!("${bound}")
    })
}

#[cfg(test)]
mod tests {
    use sqlx::Row as _;

    use super::*;
    use crate::store::sql::SqlStore;

    const WS: &str = "ws_1";
    const AGENT: &str = "agt_1";
    const SET: &str = "ss_00000000000000000000000000000001";

    /// A test's database: a SQLite file in a temporary folder, or a Postgres database of its
    /// own, dropped by [`Db::forget`].
    struct Db {
        url: String,
        _dir: Option<tempfile::TempDir>,
    }

    impl Db {
        async fn new(engine: &str) -> Self {
            if engine == "sqlite" {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite:{}", dir.path().join("acp.db").display());
                return Self {
                    url,
                    _dir: Some(dir),
                };
            }
            let name = format!("acp_u_{}", uuid::Uuid::now_v7().simple());
            Self::admin(&format!("CREATE DATABASE {name}")).await;
            let admin = Self::admin_url();
            let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
            Self {
                url: format!("{base}/{name}"),
                _dir: None,
            }
        }

        fn admin_url() -> String {
            std::env::var("ACP_TEST_POSTGRES_URL").unwrap()
        }

        async fn admin(sql: &str) {
            use sqlx::Connection as _;
            let mut conn = sqlx::PgConnection::connect(&Self::admin_url())
                .await
                .unwrap();
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        }

        /// Closes `store` and drops a Postgres database.
        async fn forget(self, store: SqlStore) {
            store.close().await;
            if self._dir.is_none() {
                let name = self.url.rsplit('/').next().unwrap_or_default();
                Self::admin(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
            }
        }
    }

    /// A store on a new database of `engine` with a workspace, an active agent, a secret set
    /// granted to it and a request lease of `uses` uses.
    async fn scene(engine: &str, uses: i64) -> (SqlStore, Db) {
        let db = Db::new(engine).await;
        let store = SqlStore::open(&db.url, &Default::default()).await.unwrap();
        let mut conn = store.write_conn().await.unwrap();
        let far = crate::time::now_ms() + 3_600_000;
        for sql in [
            format!("INSERT INTO workspaces (id, name, created_at) VALUES ('{WS}', 'w', 1)"),
            format!(
                "INSERT INTO agents (id, workspace_id, name, public_key, key_type, metadata, \
                 status, created_at, updated_at) VALUES ('{AGENT}', '{WS}', 'a', 'k', 'ed25519', \
                 '{{}}', 'active', 1, 1)"
            ),
            format!(
                "INSERT INTO vault_secret_sets (id, workspace_id, number, name, provider, \
                 environment, current_version, data_key, key_version, created_at, updated_at) \
                 VALUES ('{SET}', '{WS}', 1, 's', 'p', 'e', 1, 'dk', 1, 1, 1)"
            ),
            format!(
                "INSERT INTO vault_grants (id, workspace_id, secret_set_id, agent_id, allowed_keys, \
                 allowed_actions, created_at, created_by) VALUES ('grt_1', '{WS}', '{SET}', \
                 '{AGENT}', '[\"*\"]', '[\"proxy\"]', 1, 'test')"
            ),
            format!(
                "INSERT INTO vault_leases (id, workspace_id, kind, agent_id, secret_set_id, purpose, \
                 actions, token_hash, uses_left, expires_at, created_at, created_by) VALUES \
                 ('lse_1', '{WS}', 'request', '{AGENT}', '{SET}', 'p', '[\"proxy\"]', 'h', {uses}, \
                 {far}, {}, 'test')",
                crate::time::now_ms()
            ),
        ] {
            sqlx::raw_sql(&sql).execute(&mut *conn).await.unwrap();
        }
        drop(conn);
        (store, db)
    }

    /// The vault proxy's change: decided on version `version`, with `nonce`, using the lease.
    fn proxied(nonce: &str, version: i64) -> Change {
        let event = AuditRecord {
            id: crate::domain::ids::new_id(crate::domain::ids::EVENT),
            workspace_id: Some(WS.into()),
            created_at: crate::time::now_ms(),
            event_type: "decision.check".into(),
            agent_id: Some(AGENT.into()),
            action: Some("vault.proxy".into()),
            decision: Some("allow".into()),
            actor: "agent".into(),
            details: serde_json::json!({}).into(),
            ..Default::default()
        };
        Change::new(VaultOp::UseLease {
            workspace_id: WS.into(),
            lease_id: "lse_1".into(),
            agent_id: AGENT.into(),
            grant_id: "grt_1".into(),
            at: crate::time::now_ms(),
        })
        .on(Basis {
            workspace_id: WS.into(),
            version,
        })
        .with_nonce(NonceClaim {
            scope: "key:k".into(),
            nonce: nonce.into(),
            expires_at: crate::time::now_ms() + 300_000,
            agent_id: Some(AGENT.into()),
        })
        .audited(event)
    }

    /// Audit events, nonces and the lease's uses left.
    async fn counts(store: &SqlStore) -> (i64, i64, i64) {
        let mut conn = store.write_conn().await.unwrap();
        let row = sqlx::query(
            "SELECT (SELECT COUNT(*) FROM audit_events) AS events, \
             (SELECT COUNT(*) FROM nonces) AS nonces, \
             (SELECT uses_left FROM vault_leases WHERE id = 'lse_1') AS uses",
        )
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        (row.get("events"), row.get("nonces"), row.get("uses"))
    }

    async fn run(store: &SqlStore, change: &Change) -> Option<Result<Applied, StoreError>> {
        run_all(store, std::slice::from_ref(change))
            .await
            .map(|mut results| results.remove(0))
    }

    async fn run_all(
        store: &SqlStore,
        changes: &[Change],
    ) -> Option<Vec<Result<Applied, StoreError>>> {
        let mut conn = store.write_conn().await.unwrap();
        apply(&mut conn, changes).await.unwrap()
    }

    async fn a_proxied_call_commits_in_one_trip_or_not_at_all(engine: &str) {
        let (store, db) = scene(engine, 2).await;
        let before = counts(&store).await;

        // Decision, nonce and the lease's use, all written by the script.
        let first = run(&store, &proxied("n1", 0)).await;
        assert!(matches!(first, Some(Ok(Applied::Done))), "{first:?}");
        assert_eq!(counts(&store).await, (before.0 + 1, 1, 1));

        // Each failed precondition leaves nothing written and no transaction open.
        let replay = run(&store, &proxied("n1", 0)).await;
        assert!(replay.is_none(), "the nonce is spent: {replay:?}");
        let stale = run(&store, &proxied("n2", 3)).await;
        assert!(stale.is_none(), "the version moved: {stale:?}");
        assert_eq!(counts(&store).await, (before.0 + 1, 1, 1));

        // The last use, then none left.
        let last = run(&store, &proxied("n3", 0)).await;
        assert!(matches!(last, Some(Ok(Applied::Done))), "{last:?}");
        let used = run(&store, &proxied("n4", 0)).await;
        assert!(used.is_none(), "no use left: {used:?}");
        assert_eq!(counts(&store).await, (before.0 + 2, 2, 0));

        // The general path answers why, from the same state.
        let changes = [proxied("n1", 0), proxied("n5", 3), proxied("n6", 0)];
        let mut conn = store.write_conn().await.unwrap();
        let replayed = super::super::apply::apply(&mut conn, &changes[..1])
            .await
            .unwrap();
        assert!(
            matches!(replayed[..], [Err(StoreError::Replay)]),
            "{replayed:?}"
        );
        let stale = super::super::apply::apply(&mut conn, &changes[1..2])
            .await
            .unwrap();
        assert!(
            matches!(stale[..], [Err(StoreError::Stale(0))]),
            "{stale:?}"
        );
        let used = super::super::apply::apply(&mut conn, &changes[2..])
            .await
            .unwrap();
        assert!(
            matches!(&used[..], [Err(StoreError::Conflict(why))] if why == "lease_used"),
            "{used:?}"
        );
        drop(conn);
        assert_eq!(counts(&store).await, (before.0 + 2, 2, 0));
        db.forget(store).await;
    }

    async fn a_batch_commits_in_one_trip_or_not_at_all(engine: &str) {
        let (store, db) = scene(engine, 2).await;
        let before = counts(&store).await;
        let mut decision = proxied("", 0);
        decision.nonce = None;
        decision.op = Op::Nothing;
        // Two uses of one lease and a decision: SQLite's script takes them one after the
        // other; on Postgres a batch goes the general way.
        let three = [proxied("n1", 0), decision.clone(), proxied("n2", 0)];
        let applied = run_all(&store, &three).await;
        if engine == "sqlite" {
            assert!(
                matches!(applied.as_deref(), Some([Ok(_), Ok(_), Ok(_)])),
                "{applied:?}"
            );
        } else {
            assert!(applied.is_none(), "{applied:?}");
            assert_eq!(counts(&store).await, before);
            let mut conn = store.write_conn().await.unwrap();
            let general = super::super::apply::apply(&mut conn, &three).await.unwrap();
            assert!(matches!(general[..], [Ok(_), Ok(_), Ok(_)]), "{general:?}");
        }
        assert_eq!(counts(&store).await, (before.0 + 3, 2, 0));
        // A decision committed beside a replay: nothing of either is written by the script.
        let replayed = [decision, proxied("n1", 0)];
        assert!(run_all(&store, &replayed).await.is_none());
        assert_eq!(counts(&store).await, (before.0 + 3, 2, 0));
        db.forget(store).await;
    }

    async fn a_false_precondition_is_told_apart_from_other_errors(engine: &str) {
        let (store, db) = scene(engine, 1).await;
        let mut conn = store.write_conn().await.unwrap();
        let (holds, fails, expected) = if engine == "sqlite" {
            (guard("1 = 1"), guard("changes() = 7"), SQLITE_GUARD)
        } else {
            let of = |rows: &str| format!("SELECT 1 / COUNT(*) FROM (SELECT 1 WHERE {rows}) AS x");
            (of("1 = 1"), of("1 = 0"), POSTGRES_GUARD)
        };
        let failed_as = |err: sqlx::Error| {
            err.as_database_error()
                .map(|e| e.message().to_owned())
                .unwrap_or_default()
        };
        sqlx::query(&holds).execute(&mut *conn).await.unwrap();
        let refused = sqlx::query(&fails).execute(&mut *conn).await;
        assert_eq!(failed_as(refused.unwrap_err()), expected);
        let other = sqlx::query("SELECT * FROM no_such_table")
            .execute(&mut *conn)
            .await;
        assert_ne!(failed_as(other.unwrap_err()), expected);
        drop(conn);
        db.forget(store).await;
    }

    async fn a_bare_nonce_is_scripted_other_operations_are_not(engine: &str) {
        let (store, db) = scene(engine, 1).await;
        let before = counts(&store).await;
        // A verified request's nonce, without events: a SQLite script; Postgres's statement is
        // the events' INSERT, so it goes the general way.
        let mut verified = proxied("v1", 0);
        verified.audit.clear();
        verified.op = Op::Nothing;
        let applied = run(&store, &verified).await;
        let claimed = if engine == "sqlite" {
            assert!(matches!(applied, Some(Ok(Applied::Done))), "{applied:?}");
            1
        } else {
            assert!(applied.is_none(), "{applied:?}");
            0
        };
        assert_eq!(
            counts(&store).await,
            (before.0, before.1 + claimed, before.2)
        );
        if engine == "sqlite" {
            assert!(run(&store, &verified).await.is_none(), "a replay");
        }
        // An operation the script does not write.
        let mut other = proxied("n1", 0);
        other.op = Op::Vault(VaultOp::RevokeGrant {
            workspace_id: WS.into(),
            grant_id: "grt_1".into(),
            at: 1,
        });
        assert!(run(&store, &other).await.is_none());
        assert_eq!(
            counts(&store).await,
            (before.0, before.1 + claimed, before.2)
        );
        db.forget(store).await;
    }

    /// Each case on SQLite, and on Postgres when the tests are built with
    /// `ACP_TEST_POSTGRES_URL`.
    macro_rules! on_both_engines {
        ($($case:ident),* $(,)?) => {
            mod sqlite {
                $(#[tokio::test]
                async fn $case() {
                    super::$case("sqlite").await;
                })*
            }
            #[cfg(acp_postgres)]
            mod postgres {
                $(#[tokio::test]
                async fn $case() {
                    super::$case("postgres").await;
                })*
            }
        };
    }

    /// The reads of a request under a lease: the set by id or number, its grants, the lease of
    /// a token's hash (or none), a revoke-all's cutoff; no row for a set that is not there.
    async fn a_leased_request_reads_its_scene_at_once(engine: &str) {
        use crate::store::{SetRef, VaultStore as _};
        let (store, db) = scene(engine, 1).await;
        let by_number = SetRef::Number(1);
        let found = store
            .leased_scene(WS, &by_number, Some("h"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((found.set.id.as_str(), found.set.number), (SET, 1));
        // The fixture has no version row: read as missing, not as an error.
        assert!(found.version.is_none());
        assert_eq!(found.grants.len(), 1);
        assert_eq!(found.grants[0].id, "grt_1");
        let lease = found.lease.unwrap();
        assert_eq!((lease.id.as_str(), lease.uses_left), ("lse_1", Some(1)));
        assert!(lease.revoked_at.is_none());
        let by_id = SetRef::Id(crate::domain::ids::SecretSetId::parse(SET).unwrap());
        let found = store.leased_scene(WS, &by_id, None).await.unwrap().unwrap();
        assert!(found.lease.is_none() && found.grants.len() == 1);
        let found = store
            .leased_scene(WS, &by_id, Some("other"))
            .await
            .unwrap()
            .unwrap();
        assert!(found.lease.is_none());
        assert!(store
            .leased_scene(WS, &SetRef::Number(2), Some("h"))
            .await
            .unwrap()
            .is_none());
        assert!(store
            .leased_scene("ws_2", &by_number, Some("h"))
            .await
            .unwrap()
            .is_none());
        // A revoke-all after the lease was issued reads it as revoked then.
        let cutoff = crate::time::now_ms() + 1_000;
        let mut conn = store.write_conn().await.unwrap();
        sqlx::raw_sql(&format!(
            "INSERT INTO kill_switches (workspace_id, minting_paused, all_revoked_at, updated_at) \
             VALUES ('{WS}', 0, {cutoff}, 1)"
        ))
        .execute(&mut *conn)
        .await
        .unwrap();
        drop(conn);
        let found = store
            .leased_scene(WS, &by_number, Some("h"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.lease.unwrap().revoked_at, Some(cutoff));
        db.forget(store).await;
    }

    /// Postgres's write connections plan each prepared statement once; its reads keep the
    /// default. (SQLite has no such setting.)
    async fn writes_are_planned_once_reads_for_their_values(engine: &str) {
        let (store, db) = scene(engine, 1).await;
        if engine == "postgres" {
            let show = "SELECT current_setting('plan_cache_mode') AS mode";
            let mut conn = store.write_conn().await.unwrap();
            let row = sqlx::query(show).fetch_one(&mut *conn).await.unwrap();
            assert_eq!(row.get::<String, _>("mode"), "force_generic_plan");
            drop(conn);
            let row = sqlx::query(show).fetch_one(&store.read).await.unwrap();
            assert_eq!(row.get::<String, _>("mode"), "auto");
            let mut conn = store.range_write_conn().await.unwrap();
            let row = sqlx::query(show).fetch_one(&mut *conn).await.unwrap();
            assert_eq!(row.get::<String, _>("mode"), "auto");
        } else {
            // One writer: the range deletes take the same connection as every other write.
            let conn = store.range_write_conn().await.unwrap();
            assert!(matches!(conn, super::super::WriteConn::Held(_)));
        }
        db.forget(store).await;
    }

    on_both_engines!(
        a_leased_request_reads_its_scene_at_once,
        writes_are_planned_once_reads_for_their_values,
        a_proxied_call_commits_in_one_trip_or_not_at_all,
        a_batch_commits_in_one_trip_or_not_at_all,
        a_false_precondition_is_told_apart_from_other_errors,
        a_bare_nonce_is_scripted_other_operations_are_not,
    );
}
