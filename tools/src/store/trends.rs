//! Statements only `withdrawals-tools bench --trends` uses: set-based seeding of a large history
//! of withdrawals with their transitions, for timing the console's trend queries over it.
//!
//! Nothing here runs in the service. The rows go through the real schema (CHECK constraints,
//! foreign keys, the append-only triggers, migration 0036's partial index). Ids are UUIDv7 of each
//! withdrawal's creation time, as the service makes them.

use withdrawals::storage::{Backend, Db, DbTime, Result};
use withdrawals::with_conn;

/// Seeds withdrawals `from..to` (numbered rows) of `account` in one transaction: row `i` is
/// created `(i · 2654435761) mod spread_us` microseconds before `newest`, moves to `processing`
/// a second later, and then by `i mod 100`: 0–89 complete 3 s after creation, 90–95 fail, 96–97
/// wait in `requires_review`, 98 goes through review and completes ten minutes later, 99 stays in
/// `processing`.
pub async fn seed_withdrawals(
    db: &Db,
    account: uuid::Uuid,
    from: i64,
    to: i64,
    newest: DbTime,
    spread_us: i64,
) -> Result<()> {
    let mut tx = db.begin().await?;
    let postgres = tx.backend() == Backend::Postgres;
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
    // A UUIDv7 of the creation's millisecond: 48 bits of time, version 7, variant 10, random rest.
    let v7 = if postgres {
        "CAST(lpad(to_hex(g / 1000), 12, '0') || '7' || substr(md5(random()::text), 1, 3) || '8'
              || substr(md5(random()::text), 1, 15) AS uuid)"
    } else {
        "unhex(printf('%012x', g / 1000) || '7' || substr(hex(randomblob(2)), 1, 3) || '8'
               || substr(hex(randomblob(8)), 1, 15))"
    };
    let new_id = if postgres { "gen_random_uuid()" } else { "randomblob(16)" };
    let (id_type, int_type, text_type) =
        if postgres { ("uuid", "bigint", "text") } else { ("BLOB", "INTEGER", "TEXT") };
    let source = if postgres {
        format!(
            "INSERT INTO bench_tr_src (i, id, created_us, status)
             SELECT s.i, {v7}, s.g, CASE WHEN s.i % 100 < 90 OR s.i % 100 = 98 THEN 'completed'
                                         WHEN s.i % 100 < 96 THEN 'failed'
                                         WHEN s.i % 100 < 98 THEN 'requires_review' ELSE 'processing' END
             FROM (SELECT n AS i, $3::bigint - (n * 2654435761) % $4::bigint AS g
                   FROM generate_series($1::bigint, $2::bigint - 1) AS n) s",
            v7 = v7.replace("g / 1000", "s.g / 1000")
        )
    } else {
        format!(
            "WITH RECURSIVE n(i) AS (SELECT $1 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < $2),
                  s(i, g) AS (SELECT i, $3 - (i * 2654435761) % $4 FROM n)
             INSERT INTO bench_tr_src (i, id, created_us, status)
             SELECT i, {v7}, g, CASE WHEN i % 100 < 90 OR i % 100 = 98 THEN 'completed'
                                     WHEN i % 100 < 96 THEN 'failed'
                                     WHEN i % 100 < 98 THEN 'requires_review' ELSE 'processing' END
             FROM s"
        )
    };
    let destination = if postgres {
        "jsonb_build_object('type', 'bank_account', 'account_number', '12345678')"
    } else {
        "json_object('type', 'bank_account', 'account_number', '12345678')"
    };
    let done_us = "s.created_us + CASE WHEN s.i % 100 = 98 THEN 600000000 ELSE 3000000 END";
    let withdrawals = format!(
        "INSERT INTO withdrawals (id, account_id, status, amount, currency, destination, reference, failure_code,
                                  version, idempotency_key, correlation_id, created_at, updated_at, sandbox)
         SELECT s.id, $1, s.status, 100 + s.i % 5000, 'USD', {destination}, NULL,
                CASE WHEN s.status = 'failed' THEN 'invalid_account' END, 3, 'bench-trends-' || s.i,
                'bench-trends-' || s.i, {created}, {updated}, {no}
         FROM bench_tr_src s",
        created = time("s.created_us"),
        updated = time(done_us),
        no = if postgres { "false" } else { "0" },
    );
    // Each move: (from, to, microseconds after creation, which rows make it).
    let moves: [(&str, &str, &str, &str); 6] = [
        ("NULL", "'pending'", "0", "TRUE"),
        ("'pending'", "'processing'", "1000000", "TRUE"),
        ("'processing'", "'completed'", "3000000", "s.i % 100 < 90"),
        ("'processing'", "'failed'", "3000000", "s.i % 100 >= 90 AND s.i % 100 < 96"),
        ("'processing'", "'requires_review'", "5000000", "s.i % 100 >= 96 AND s.i % 100 < 99"),
        ("'requires_review'", "'completed'", "600000000", "s.i % 100 = 98"),
    ];
    let transitions: Vec<String> = moves
        .iter()
        .map(|(from, to, after, which)| {
            format!(
                "INSERT INTO withdrawal_transitions (id, account_id, withdrawal_id, from_status, to_status, actor,
                                                     reason, correlation_id, at, evidence)
                 SELECT {new_id}, $1, s.id, {from}, {to}, 'bench', 'bench seed', 'bench-trends-' || s.i, {at}, NULL
                 FROM bench_tr_src s WHERE {which}",
                at = time(&format!("s.created_us + {after}")),
            )
        })
        .collect();
    let newest_us = newest.0.timestamp_micros();
    with_conn!(&mut tx, |conn| {
        sqlx::query("DROP TABLE IF EXISTS bench_tr_src").execute(&mut *conn).await?;
        sqlx::query(&format!(
            "CREATE TEMP TABLE bench_tr_src (i {int_type} NOT NULL, id {id_type} NOT NULL,
                                             created_us {int_type} NOT NULL, status {text_type} NOT NULL)"
        ))
        .execute(&mut *conn)
        .await?;
        sqlx::query(&source).bind(from).bind(to).bind(newest_us).bind(spread_us.max(1)).execute(&mut *conn).await?;
        sqlx::query(&withdrawals).bind(account).execute(&mut *conn).await?;
        for statement in &transitions {
            sqlx::query(statement).bind(account).execute(&mut *conn).await?;
        }
        sqlx::query("DROP TABLE bench_tr_src").execute(&mut *conn).await?;
    });
    tx.commit().await
}
