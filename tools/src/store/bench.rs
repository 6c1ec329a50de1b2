//! Statements only `withdrawals-tools bench` uses: progress counts while a load drains, set-based
//! seeding of a large dead-letter store, planner statistics, and the plans of the triage queries.
//!
//! Nothing here runs in the service. The seeding writes real rows through the real schema (its
//! CHECK constraints, foreign keys and triggers all apply): one `dead` job per dead letter (the
//! envelope's `job_id` is a UNIQUE foreign key), the envelope, and a `closed` event for a share
//! of them.

use withdrawals::storage::{Backend, Db, DbTime, Result};
use withdrawals::{with_conn, with_read_conn};

/// Withdrawals by status (how far an end-to-end load has drained).
pub async fn withdrawal_status_counts(db: &Db) -> Result<Vec<(String, i64)>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (String, i64)>("SELECT status, COUNT(*) FROM withdrawals GROUP BY status ORDER BY status")
            .fetch_all(&mut *conn)
            .await?
    }))
}

/// First creation and last update of the withdrawals in `status` (the service's own clock).
pub async fn withdrawal_time_span(db: &Db, status: &str) -> Result<(Option<DbTime>, Option<DbTime>, i64)> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (Option<DbTime>, Option<DbTime>, i64)>(
            "SELECT MIN(created_at), MAX(updated_at), COUNT(*) FROM withdrawals WHERE status = $1",
        )
        .bind(status)
        .fetch_one(&mut *conn)
        .await?
    }))
}

/// Jobs of `kind` that succeeded, and the last time one of them was finished.
pub async fn succeeded_jobs(db: &Db, kind: &str) -> Result<(i64, Option<DbTime>)> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (i64, Option<DbTime>)>(
            "SELECT COUNT(*), MAX(updated_at) FROM jobs WHERE kind = $1 AND status = 'succeeded'",
        )
        .bind(kind)
        .fetch_one(&mut *conn)
        .await?
    }))
}

/// One kind of dead letter in the seeded mix; `weight` out of the sum of all weights.
#[derive(Debug, Clone)]
pub struct SeedProfile {
    pub weight: u32,
    pub queue: &'static str,
    pub job_type: &'static str,
    pub payload_version: i64,
    pub category: &'static str,
    pub error_code: &'static str,
    pub error_class: &'static str,
    pub side_effect_state: &'static str,
    pub owner: &'static str,
    pub runbook: &'static str,
    pub attempts: i64,
    pub message: &'static str,
}

/// Seeds dead letters `from..to` (numbered rows) in one transaction, set-based: a temporary
/// table of row numbers with fresh ids and failure times, then one `INSERT … SELECT` each into
/// `jobs`, `dead_letters` and `dead_letter_events`, and into the open set (`open_dead_letters`,
/// `dead_letter_open_counts`) that the service maintains letter by letter. Row `i` takes its
/// profile from a hash of `i` (so every chunk has the same mix), fails `(i · 2654435761) mod
/// spread_us` microseconds before `newest`, and is closed (an event two hours later) when
/// `i mod 10 < closed_tenths`.
pub async fn seed_dead_letters(
    db: &Db,
    profiles: &[SeedProfile],
    from: i64,
    to: i64,
    newest: DbTime,
    spread_us: i64,
    closed_tenths: i64,
) -> Result<()> {
    let total: u32 = profiles.iter().map(|p| p.weight).sum::<u32>().max(1);
    let mut tx = db.begin().await?;
    let postgres = tx.backend() == Backend::Postgres;
    // Dialect pieces: time from integer microseconds, bytes from text, a fresh id, the row source.
    let time = |us: &str| -> String {
        if postgres {
            format!("(timestamptz 'epoch' + ({us}) * interval '1 microsecond')")
        } else {
            format!(
                "(strftime('%Y-%m-%dT%H:%M:%S', ({us}) / 1000000, 'unixepoch')
                  || '.' || printf('%06d', ({us}) % 1000000) || 'Z')"
            )
        }
    };
    let bytes = |text: &str| -> String {
        if postgres {
            format!("convert_to({text}, 'UTF8')")
        } else {
            format!("CAST({text} AS BLOB)")
        }
    };
    let new_id = if postgres { "gen_random_uuid()" } else { "randomblob(16)" };
    // The seeded letters are about no withdrawal: the system account's, as an import's are.
    let system = if postgres { "'00000000-0000-0000-0000-000000000000'::uuid" } else { "zeroblob(16)" };
    let id_text = |col: &str| -> String {
        if postgres {
            format!("{col}::text")
        } else {
            format!("lower(hex({col}))")
        }
    };
    let payload = if postgres {
        format!("jsonb_build_object('withdrawal_id', {0}, 'operation_key', {0})", id_text("s.job_id"))
    } else {
        format!("json_object('withdrawal_id', {0}, 'operation_key', {0})", id_text("s.job_id"))
    };
    let (id_type, int_type) = if postgres { ("uuid", "bigint") } else { ("BLOB", "INTEGER") };

    // The profiles as a VALUES list of bound parameters: ($n…) per profile, slots [lo, hi) of 1000.
    let mut values = Vec::new();
    let mut n = 0;
    for _ in profiles {
        let row: Vec<String> = (0..13)
            .map(|_| {
                n += 1;
                format!("${n}")
            })
            .collect();
        values.push(format!("({})", row.join(", ")));
    }
    let profile_cte = format!(
        "p(lo, hi, queue, job_type, payload_version, category, error_code, error_class, side_effect_state, owner,
           runbook, attempts, message) AS (VALUES {})",
        values.join(", ")
    );
    let source = if postgres {
        format!(
            "INSERT INTO bench_dl_src (i, job_id, dl_id, slot, failed_us)
             SELECT g, {new_id}, {new_id}, (g * 7919 + 13) % 1000, $3::bigint - (g * 2654435761) % $4::bigint
             FROM generate_series($1::bigint, $2::bigint - 1) AS g"
        )
    } else {
        format!(
            "WITH RECURSIVE g(i) AS (SELECT $1 UNION ALL SELECT i + 1 FROM g WHERE i + 1 < $2)
             INSERT INTO bench_dl_src (i, job_id, dl_id, slot, failed_us)
             SELECT i, {new_id}, {new_id}, (i * 7919 + 13) % 1000, $3 - (i * 2654435761) % $4 FROM g"
        )
    };
    let hour_us = 3_600_000_000_i64;
    let jobs = format!(
        "WITH {profile_cte}
         INSERT INTO jobs (id, account_id, queue, kind, payload, payload_version, status, attempts, receives, run_at,
                           first_attempt_at, last_error, correlation_id, withdrawal_id, created_at, updated_at)
         SELECT s.job_id, {system}, p.queue, p.job_type, {payload_bytes}, p.payload_version, 'dead', p.attempts, p.attempts,
                {run_at}, {first}, p.error_code, 'bench-' || s.i, NULL, {first}, {failed}
         FROM bench_dl_src s JOIN p ON s.slot >= p.lo AND s.slot < p.hi",
        payload_bytes = bytes("'{\"bench\":' || s.i || '}'"),
        run_at = time("s.failed_us"),
        first = time(&format!("s.failed_us - {hour_us}")),
        failed = time("s.failed_us"),
    );
    let letters = format!(
        "WITH {profile_cte}
         INSERT INTO dead_letters (id, account_id, job_id, queue, job_type, payload_version, payload, raw_payload,
                                   attempts, first_attempt_at, failed_at, error_code, error_class, error_message,
                                   stack, worker_host, worker_version, correlation_id, idempotency_key, withdrawal_id,
                                   side_effect_state, category, owner, runbook)
         SELECT s.dl_id, {system}, s.job_id, p.queue, p.job_type, p.payload_version,
                CASE WHEN p.category = 'bad_payload' THEN NULL ELSE {payload} END,
                CASE WHEN p.category = 'bad_payload' THEN {raw} END,
                p.attempts, {first}, {failed}, p.error_code, p.error_class, p.message || ' (bench #' || s.i || ')',
                NULL, 'bench-host-' || (s.i % 4), 'bench', 'bench-' || s.i, NULL, NULL,
                p.side_effect_state, p.category, p.owner, p.runbook
         FROM bench_dl_src s JOIN p ON s.slot >= p.lo AND s.slot < p.hi",
        raw = bytes("'{\"withdrawal_id\": oops'"),
        first = time(&format!("s.failed_us - {hour_us}")),
        failed = time("s.failed_us"),
    );
    let events = format!(
        "INSERT INTO dead_letter_events (id, account_id, dead_letter_id, action, actor, reason, details, at)
         SELECT {new_id}, {system}, s.dl_id, 'closed', 'bench-operator', 'handled (bench seed)', NULL, {at}
         FROM bench_dl_src s WHERE s.i % 10 < $1",
        at = time(&format!("s.failed_us + {}", 2 * hour_us)),
    );
    // The open set, as `dead_letters::insert` and the close would have left it.
    let open_rows = "INSERT INTO open_dead_letters (account_id, dead_letter_id, category, error_code, failed_at)
         SELECT d.account_id, d.id, d.category, d.error_code, d.failed_at
         FROM bench_dl_src s JOIN dead_letters d ON d.id = s.dl_id WHERE s.i % 10 >= $1";
    let open_counts = "INSERT INTO dead_letter_open_counts (category, error_code, open)
         SELECT d.category, d.error_code, COUNT(*)
         FROM bench_dl_src s JOIN dead_letters d ON d.id = s.dl_id WHERE s.i % 10 >= $1
         GROUP BY d.category, d.error_code
         ON CONFLICT (category, error_code) DO UPDATE SET open = dead_letter_open_counts.open + excluded.open";

    let newest_us = newest.0.timestamp_micros();
    with_conn!(&mut tx, |conn| {
        sqlx::query("DROP TABLE IF EXISTS bench_dl_src").execute(&mut *conn).await?;
        sqlx::query(&format!(
            "CREATE TEMP TABLE bench_dl_src (i {int_type} NOT NULL, job_id {id_type} NOT NULL, dl_id {id_type} NOT NULL,
                                             slot {int_type} NOT NULL, failed_us {int_type} NOT NULL)"
        ))
        .execute(&mut *conn)
        .await?;
        sqlx::query(&source).bind(from).bind(to).bind(newest_us).bind(spread_us.max(1)).execute(&mut *conn).await?;
        for statement in [&jobs, &letters] {
            let mut q = sqlx::query(statement);
            let (mut lo, mut cumulative) = (0_i64, 0_i64);
            for p in profiles {
                cumulative += i64::from(p.weight);
                let hi = cumulative * 1000 / i64::from(total);
                q = q
                    .bind(lo)
                    .bind(hi)
                    .bind(p.queue)
                    .bind(p.job_type)
                    .bind(p.payload_version)
                    .bind(p.category)
                    .bind(p.error_code)
                    .bind(p.error_class)
                    .bind(p.side_effect_state)
                    .bind(p.owner)
                    .bind(p.runbook)
                    .bind(p.attempts)
                    .bind(p.message);
                lo = hi;
            }
            q.execute(&mut *conn).await?;
        }
        for statement in [events.as_str(), open_rows, open_counts] {
            sqlx::query(statement).bind(closed_tenths).execute(&mut *conn).await?;
        }
        sqlx::query("DROP TABLE bench_dl_src").execute(&mut *conn).await?;
    });
    tx.commit().await
}

/// Dead letters stored, and how many of them are still open (no `closed` event).
pub async fn dead_letter_counts(db: &Db) -> Result<(i64, i64)> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT (SELECT COUNT(*) FROM dead_letters),
                    (SELECT COUNT(*) FROM dead_letters d WHERE NOT EXISTS
                        (SELECT 1 FROM dead_letter_events e WHERE e.account_id = d.account_id AND e.dead_letter_id = d.id AND e.action = 'closed'))",
        )
        .fetch_one(&mut *conn)
        .await?
    }))
}

/// Refreshes planner statistics after a bulk load, as autovacuum (PostgreSQL) or `ANALYZE`
/// (SQLite) would. On PostgreSQL it also vacuums every table a withdrawal's life writes, as
/// pgbench vacuums its tables before each run: a phase then starts without autovacuum working
/// off the previous phase's dead rows in the middle of it.
pub async fn refresh_statistics(db: &Db) -> Result<()> {
    match db {
        Db::Postgres(pool) => {
            sqlx::query(
                "VACUUM (ANALYZE) jobs, withdrawals, withdrawal_transitions, balances, ledger_entries,
                                  provider_attempts, idempotency_records, dead_letters, dead_letter_events,
                                  open_dead_letters, dead_letter_open_counts",
            )
            .execute(pool)
            .await?;
        }
        Db::Sqlite(_) => {
            let mut tx = db.begin().await?;
            with_conn!(&mut tx, |conn| {
                sqlx::query("ANALYZE").execute(&mut *conn).await?;
            });
            tx.commit().await?;
        }
    }
    Ok(())
}

/// The server's version line (`SELECT version()` / `sqlite_version()`).
pub async fn server_version(db: &Db) -> Result<String> {
    Ok(with_read_conn!(db, |conn| {
        match db {
            Db::Postgres(_) => sqlx::query_scalar::<_, String>("SELECT version()").fetch_one(&mut *conn).await?,
            Db::Sqlite(_) => {
                let v = sqlx::query_scalar::<_, String>("SELECT sqlite_version()").fetch_one(&mut *conn).await?;
                format!("SQLite {v}")
            }
        }
    }))
}

/// One table's row-level counters (`pg_stat_user_tables`, published like `xact_commit`) and how
/// many indexes it has: every row version that is not a HOT update writes one entry into each.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TableActivity {
    pub table: String,
    pub inserts: i64,
    pub updates: i64,
    pub hot_updates: i64,
    pub deletes: i64,
    pub indexes: i64,
}

/// PostgreSQL's own counters, to turn a phase into per-withdrawal database work.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PgActivity {
    /// This connection's server process (its parent is the postmaster).
    pub backend_pid: i32,
    /// Committed transactions in this database (read-only ones included; published by each
    /// backend up to ~10 s late).
    pub xact_commit: i64,
    /// The next transaction id: its growth counts transactions that wrote (exact, immediate).
    pub next_xid: i64,
    /// The current WAL position in bytes (exact, immediate).
    pub wal_lsn: i64,
    /// Cluster-wide WAL records and syncs (`pg_stat_wal`, published like `xact_commit`).
    pub wal_records: i64,
    pub wal_sync: i64,
    /// The service's tables.
    #[sqlx(skip)]
    pub tables: Vec<TableActivity>,
}

/// The counters now (a fresh statistics snapshot); `None` on SQLite.
pub async fn postgres_activity(db: &Db) -> Result<Option<PgActivity>> {
    let Db::Postgres(pool) = db else { return Ok(None) };
    let mut conn = pool.acquire().await?;
    sqlx::query("SELECT pg_stat_clear_snapshot()").execute(&mut *conn).await?;
    let activity = sqlx::query_as::<_, PgActivity>(
        "SELECT pg_backend_pid() AS backend_pid,
                (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS xact_commit,
                pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next_xid,
                (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint AS wal_lsn,
                w.wal_records, w.wal_sync
         FROM pg_stat_wal w",
    )
    .fetch_one(&mut *conn)
    .await?;
    let tables = sqlx::query_as::<_, TableActivity>(
        "SELECT t.relname::text AS table, t.n_tup_ins AS inserts, t.n_tup_upd AS updates,
                t.n_tup_hot_upd AS hot_updates, t.n_tup_del AS deletes,
                (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid) AS indexes
         FROM pg_stat_user_tables t WHERE t.schemaname = 'public' ORDER BY t.relname",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(Some(PgActivity { tables, ..activity }))
}
