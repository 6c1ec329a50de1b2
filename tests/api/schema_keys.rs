//! Issue 29: a schema keyed by account. Reads the migrated schema from the database's own catalog
//! (PostgreSQL's `pg_index`/`pg_constraint`, SQLite's pragmas) and checks it against the table list
//! in the README's "Scaling" section: every table is classified; a per-account table carries the
//! account and its primary, unique and foreign keys include it; no global table references a
//! per-account one. The per-account tables not keyed yet are a ratchet that may only shrink.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::{Connection, Row};

use uuid::Uuid;
use withdrawals::storage::{Db, PoolSettings};

use crate::harness::{fresh_database, Backend, TestApp};
use crate::{both_backends, on_connection};

/// Runs one statement with its binds on the connection `conn`, panicking if it fails: the seeds of
/// the populated-migration tests.
macro_rules! exec {
    ($conn:ident, $sql:expr $(, $bind:expr)* $(,)?) => {
        sqlx::query($sql)$(.bind($bind))*.execute(&mut $conn).await.unwrap()
    };
}

both_backends!(
    with = TestApp::spawn;
    every_table_is_classified_and_per_account_keys_name_the_account,
    append_only_tables_are_documented_and_refuse_the_service_role,
);

/// Per-account tables whose keys do not include the account yet (issue 29's work list). Remove a
/// table when its migration lands; the test fails if a listed table is already compliant.
const NOT_YET_KEYED: &[&str] = &[];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    PerAccount,
    Reference,
    Local,
}

#[derive(Debug, Default, Clone)]
struct Table {
    /// (column, NOT NULL)
    columns: Vec<(String, bool)>,
    primary_key: Vec<String>,
    /// (index or constraint name, columns); an expression column reads `(expression)`.
    uniques: Vec<(String, Vec<String>)>,
    foreign_keys: Vec<ForeignKey>,
}

#[derive(Debug, Clone)]
struct ForeignKey {
    columns: Vec<String>,
    target: String,
    target_columns: Vec<String>,
}

/// The table list of the README's "Where every table lives": its rows, as trimmed cells.
fn documented_rows() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme.split("#### Where every table lives").nth(1).expect("the README's table list");
    let table = section.lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|'));
    let rows: Vec<Vec<String>> = table
        .map(|line| line.split('|').map(|c| c.trim().to_owned()).collect::<Vec<_>>())
        .filter(|cells| cells.get(1).is_some_and(|name| name.starts_with('`') && name.ends_with('`')))
        .collect();
    assert!(!rows.is_empty(), "the README's table list is empty");
    rows
}

/// The tables of the README's list, each with its kind.
fn documented() -> BTreeMap<String, Kind> {
    let mut kinds = BTreeMap::new();
    for cells in documented_rows() {
        let name = cells[1].trim_matches('`');
        let kind = match cells[2].as_str() {
            "per-account" => Kind::PerAccount,
            "reference" => Kind::Reference,
            "local" => Kind::Local,
            other => panic!("README: table `{name}` has an unknown kind `{other}`"),
        };
        assert!(kinds.insert(name.to_owned(), kind).is_none(), "README lists `{name}` twice");
    }
    kinds
}

/// The tables the list marks `append-only` in its `rows` column; every other one is `mutable`.
fn documented_append_only() -> BTreeSet<String> {
    let mut append_only = BTreeSet::new();
    for cells in documented_rows() {
        let name = cells[1].trim_matches('`').to_owned();
        match cells.get(3).map(String::as_str) {
            Some("append-only") => {
                append_only.insert(name);
            }
            Some("mutable") => {}
            other => panic!("README: table `{name}` has rows {other:?}, neither `append-only` nor `mutable`"),
        }
    }
    assert!(!append_only.is_empty(), "no append-only table in the README's list");
    append_only
}

/// The account column of a per-account table.
fn account_column(table: &str) -> &'static str {
    if table == "accounts" {
        "id"
    } else {
        "account_id"
    }
}

/// What is wrong with each table, by the rules above; a table with nothing wrong is absent.
/// One thing wrong with a table. `unkeyed` marks what the ratchet tolerates on a listed table
/// (the account missing from the table or its keys); anything else fails whatever the list says.
#[derive(Debug, Clone)]
struct Finding {
    unkeyed: bool,
    message: String,
}

fn unkeyed(message: String) -> Finding {
    Finding { unkeyed: true, message }
}

fn wrong(message: String) -> Finding {
    Finding { unkeyed: false, message }
}

fn messages(findings: &[Finding]) -> String {
    findings.iter().map(|f| f.message.as_str()).collect::<Vec<_>>().join("; ")
}

fn violations(schema: &BTreeMap<String, Table>, kinds: &BTreeMap<String, Kind>) -> BTreeMap<String, Vec<Finding>> {
    let mut found: BTreeMap<String, Vec<Finding>> = BTreeMap::new();
    for (name, table) in schema {
        let mut findings = Vec::new();
        let Some(kind) = kinds.get(name) else {
            found.entry(name.clone()).or_default().push(wrong("not classified in the README".into()));
            continue;
        };
        if *kind == Kind::PerAccount {
            let account = account_column(name);
            match table.columns.iter().find(|(c, _)| c == account) {
                None => findings.push(unkeyed(format!("no `{account}` column"))),
                Some((_, false)) => findings.push(wrong(format!("`{account}` may be NULL"))),
                Some(_) => {}
            }
            if !table.primary_key.iter().any(|c| c == account) {
                findings.push(unkeyed(format!("primary key ({}) lacks `{account}`", table.primary_key.join(", "))));
            }
            for (unique, columns) in &table.uniques {
                if !columns.iter().any(|c| c == account) {
                    findings.push(unkeyed(format!("unique `{unique}` ({}) lacks `{account}`", columns.join(", "))));
                }
            }
        }
        for fk in &table.foreign_keys {
            let target = kinds.get(&fk.target).copied();
            let what = format!("foreign key ({}) → {}", fk.columns.join(", "), fk.target);
            match (*kind, target) {
                (Kind::PerAccount, Some(Kind::PerAccount)) => {
                    let pair = (account_column(name), account_column(&fk.target));
                    let paired = fk
                        .columns
                        .iter()
                        .zip(&fk.target_columns)
                        .any(|(from, to)| (from.as_str(), to.as_str()) == pair);
                    if !paired {
                        findings.push(unkeyed(format!("{what} does not pair the accounts")));
                    }
                }
                (Kind::PerAccount, Some(Kind::Local)) => {
                    findings
                        .push(wrong(format!("{what}: a per-account table cannot reference a coordinator-local one")));
                }
                (Kind::Reference, Some(Kind::Local)) => {
                    findings.push(wrong(format!("{what}: a reference table cannot reference a coordinator-local one")));
                }
                (Kind::Reference | Kind::Local, Some(Kind::PerAccount)) => {
                    findings.push(wrong(format!("{what}: a global table cannot reference a per-account one")));
                }
                (_, None) => findings.push(wrong(format!("{what}: the target is not classified"))),
                _ => {}
            }
        }
        if !findings.is_empty() {
            found.entry(name.clone()).or_default().extend(findings);
        }
    }
    for name in kinds.keys().filter(|name| !schema.contains_key(*name)) {
        found.entry(name.clone()).or_default().push(wrong("in the README but not in the schema".into()));
    }
    found
}

async fn every_table_is_classified_and_per_account_keys_name_the_account(app: TestApp) {
    let schema = if app.database_url.starts_with("sqlite") {
        sqlite_schema(&app.database_url).await
    } else {
        postgres_schema(&app.database_url).await
    };
    assert!(schema.contains_key("withdrawals") && schema.len() > 20, "the catalog was read: {:?}", schema.keys());
    assert!(schema["balances"].primary_key == ["account_id", "currency"], "{:?}", schema["balances"]);
    assert!(
        schema["idempotency_records"].foreign_keys.iter().any(|fk| fk.target == "withdrawals"),
        "foreign keys were read: {:?}",
        schema["idempotency_records"]
    );

    let kinds = documented();
    let found = violations(&schema, &kinds);
    let ratchet: BTreeSet<&str> = NOT_YET_KEYED.iter().copied().collect();
    for (table, findings) in &found {
        let listed = ratchet.contains(table.as_str()) && kinds.get(table) == Some(&Kind::PerAccount);
        let not_tolerated: Vec<Finding> = findings.iter().filter(|f| !(listed && f.unkeyed)).cloned().collect();
        assert!(not_tolerated.is_empty(), "`{table}`: {}", messages(&not_tolerated));
    }
    for table in &ratchet {
        let still_unkeyed = found.get(*table).is_some_and(|f| f.iter().any(|f| f.unkeyed));
        assert!(still_unkeyed, "`{table}` is keyed by account now: remove it from NOT_YET_KEYED");
    }
}

/// Issue 29 item 3: the append-only tables are exactly the README's, each guarded by its triggers
/// on both backends, and on PostgreSQL by privilege too, which survives distribution: the
/// service's role (the login role the app of this test runs as, a member of `withdrawals_app`)
/// may read and insert them and nothing more, may change every other table, and may truncate
/// none — refused by the database itself, as production runs it.
async fn append_only_tables_are_documented_and_refuse_the_service_role(app: TestApp) {
    let documented = documented_append_only();
    let sqlite = app.database_url.starts_with("sqlite");
    let schema = if sqlite { sqlite_schema(&app.database_url).await } else { postgres_schema(&app.database_url).await };
    let guarded: BTreeSet<String> = if sqlite {
        // A table refusing both: a BEFORE UPDATE and a BEFORE DELETE trigger that abort.
        let mut conn = sqlx::SqliteConnection::connect(&app.database_url).await.unwrap();
        sqlx::query_scalar(
            "SELECT tbl_name FROM sqlite_master WHERE type = 'trigger' AND sql LIKE '%BEFORE UPDATE ON%' \
               AND sql LIKE '%RAISE(ABORT, ''' || tbl_name || ' is append-only'')%'
             INTERSECT
             SELECT tbl_name FROM sqlite_master WHERE type = 'trigger' AND sql LIKE '%BEFORE DELETE ON%' \
               AND sql LIKE '%RAISE(ABORT, ''' || tbl_name || ' is append-only'')%'",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .into_iter()
        .collect()
    } else {
        // A row trigger that fires before both UPDATE and DELETE (pg_trigger.tgtype bits).
        let mut conn = sqlx::PgConnection::connect(&app.database_url).await.unwrap();
        sqlx::query_scalar(
            "SELECT DISTINCT c.relname::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
             WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace
               AND t.tgtype & 1 <> 0 AND t.tgtype & 2 <> 0 AND t.tgtype & 8 <> 0 AND t.tgtype & 16 <> 0",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .into_iter()
        .collect()
    };
    assert!(guarded.contains("ledger_entries"), "the triggers were read: {guarded:?}");
    assert_eq!(guarded, documented, "the tables with append-only triggers are the README's append-only tables");
    if sqlite {
        assert_eq!(app.service_url, app.database_url, "SQLite has no roles: the process owns its file");
        return;
    }

    // Every table's rights for the role, from the catalog.
    let mut owner = sqlx::PgConnection::connect(&app.database_url).await.unwrap();
    let rights: Vec<(String, bool, bool, bool, bool, bool)> = sqlx::query_as(
        "SELECT c.relname::text, has_table_privilege('withdrawals_app', c.oid, 'SELECT'),
                has_table_privilege('withdrawals_app', c.oid, 'INSERT'),
                has_table_privilege('withdrawals_app', c.oid, 'UPDATE'),
                has_table_privilege('withdrawals_app', c.oid, 'DELETE'),
                has_table_privilege('withdrawals_app', c.oid, 'TRUNCATE')
         FROM pg_class c WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace ORDER BY 1",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert_eq!(rights.len(), schema.len() + 1, "every table and the migrations' record: {rights:?}");
    for (table, select, insert, update, delete, truncate) in rights {
        let expected = match table.as_str() {
            "_sqlx_migrations" => (true, false, false, false, false),
            t if documented.contains(t) => (true, true, false, false, false),
            _ => (true, true, true, true, false),
        };
        assert_eq!((select, insert, update, delete, truncate), expected, "withdrawals_app's rights on `{table}`");
    }
    let member: bool = sqlx::query_scalar("SELECT pg_has_role($1, 'withdrawals_app', 'USAGE')")
        .bind(crate::harness::SERVICE_ROLE)
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert!(member, "the app runs as a member of withdrawals_app");

    // The app's own connections are the role's, and the database refuses it every rewrite.
    let Db::Postgres(pool) = &app.db else { unreachable!("a PostgreSQL app") };
    let current: String = sqlx::query_scalar("SELECT current_user::text").fetch_one(pool).await.unwrap();
    assert_eq!(current, crate::harness::SERVICE_ROLE);
    let mut service = sqlx::PgConnection::connect(&app.service_url).await.unwrap();
    for table in &documented {
        let column = &schema[table].columns[0].0;
        for statement in [
            format!("UPDATE {table} SET {column} = {column}"),
            format!("DELETE FROM {table}"),
            format!("TRUNCATE {table}"),
        ] {
            let refused = sqlx::query(&statement).execute(&mut service).await.expect_err(&statement);
            let code = refused.as_database_error().and_then(|e| e.code()).map(|c| c.into_owned());
            assert_eq!(code.as_deref(), Some("42501"), "`{statement}` as the service: {refused}");
        }
    }
    // A mutable table stays the service's to change; the migrations' record is the owner's.
    sqlx::query("DELETE FROM console_sessions WHERE false").execute(&mut service).await.unwrap();
    let refused = sqlx::query("DELETE FROM _sqlx_migrations").execute(&mut service).await.unwrap_err();
    assert!(refused.to_string().contains("permission denied"), "{refused}");
}

/// Applies the migrations up to `version` only, as a database deployed before the later ones.
async fn migrate_to(url: &str, backend: Backend, version: i64) {
    let source = match backend {
        Backend::Sqlite => "migrations/sqlite",
        Backend::Postgres => "migrations/postgres",
    };
    let older = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(source)).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let number: i64 = name.split('_').next().unwrap().parse().unwrap();
        if number <= version {
            std::fs::copy(&path, older.path().join(&name)).unwrap();
        }
    }
    let migrator = sqlx::migrate::Migrator::new(older.path()).await.unwrap();
    assert_eq!(migrator.iter().last().map(|m| m.version), Some(version));
    on_connection!(url, |conn| migrator.run(&mut conn).await.unwrap());
}

/// Every row of `tables`, each as the text of every column but `account_id` (which the key
/// migrations add), sorted: what a move must leave exactly as it was, column by column.
async fn snapshot(url: &str, backend: Backend, tables: &[&str]) -> BTreeMap<String, Vec<Vec<Option<String>>>> {
    snapshot_without(url, backend, tables, &[]).await
}

/// [`snapshot`] leaving out `added` too: columns later migrations added (checked on their own).
async fn snapshot_without(
    url: &str,
    backend: Backend,
    tables: &[&str],
    added: &[&str],
) -> BTreeMap<String, Vec<Vec<Option<String>>>> {
    let schema = match backend {
        Backend::Sqlite => sqlite_schema(url).await,
        Backend::Postgres => postgres_schema(url).await,
    };
    let mut all = BTreeMap::new();
    for table in tables {
        let columns: Vec<&str> = schema[*table]
            .columns
            .iter()
            .map(|(c, _)| c.as_str())
            .filter(|c| *c != "account_id" && !added.contains(c))
            .collect();
        let text = |c: &str| match backend {
            Backend::Sqlite => format!("quote(\"{c}\")"),
            Backend::Postgres => format!("CAST(\"{c}\" AS TEXT)"),
        };
        let sql = format!("SELECT {} FROM {table}", columns.iter().map(|c| text(c)).collect::<Vec<_>>().join(", "));
        let mut rows: Vec<Vec<Option<String>>> = on_connection!(url, |conn| {
            let fetched = sqlx::query(&sql).fetch_all(&mut conn).await.unwrap();
            fetched.iter().map(|r| (0..columns.len()).map(|i| r.try_get(i).unwrap()).collect()).collect()
        });
        rows.sort();
        assert!(!rows.is_empty(), "{table} was seeded");
        all.insert(format!("{table} ({})", columns.join(", ")), rows);
    }
    all
}

/// (id, account, idempotency key, amount) of a stored credit.
type CreditRow = (Uuid, Uuid, String, i64);

/// Issue 29's key migrations move a populated database's rows: a database at migration 21 holding
/// credits migrates to the current schema with every credit as it was, and still append-only.
async fn a_populated_database_moves_to_account_keys_losing_nothing(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    migrate_to(&url, backend, 21).await;
    let now = chrono::Utc::now();
    let accounts = [Uuid::now_v7(), Uuid::now_v7()];
    let mut credits: Vec<(Uuid, Uuid, String, i64)> =
        (0..6_i64).map(|i| (Uuid::now_v7(), accounts[(i % 2) as usize], format!("wire-{i}"), 1_000 + i)).collect();
    on_connection!(&url, |conn| {
        for account in accounts {
            exec!(conn, "INSERT INTO accounts (id, name, created_at) VALUES ($1, $2, $3)", account, "Ada", now);
        }
        for (id, account, key, amount) in &credits {
            exec!(
                conn,
                "INSERT INTO account_credits (id, account_id, idempotency_key, fingerprint, currency, amount_minor,
                                              reason, actor, response_body, created_at)
                 VALUES ($1, $2, $3, $4, 'USD', $5, 'wire received', 'local:ops', $6, $7)",
                id,
                account,
                key,
                key.as_bytes().to_vec(),
                amount,
                format!("{{\"amount_minor\":{amount}}}").into_bytes(),
                now
            );
        }
    });

    let db = Db::connect(&url, &PoolSettings::default()).await.unwrap();
    db.migrate().await.unwrap();
    db.check_ready().await.unwrap();
    db.close().await;

    let (after, refused): (Vec<CreditRow>, [bool; 5]) = on_connection!(&url, |conn| {
        let rows = sqlx::query_as(
            "SELECT id, account_id, idempotency_key, amount_minor FROM account_credits ORDER BY idempotency_key",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let update = sqlx::query("UPDATE account_credits SET reason = 'rewritten'").execute(&mut conn).await;
        let delete = sqlx::query("DELETE FROM account_credits").execute(&mut conn).await;
        // The table's other rules survived the move: one credit per (account, key), and a
        // positive amount.
        let again = |key: &'static str, amount: i64| {
            sqlx::query(
                "INSERT INTO account_credits (id, account_id, idempotency_key, fingerprint, currency, amount_minor,
                                              reason, actor, response_body, created_at)
                 VALUES ($1, $2, $3, $4, 'USD', $5, 'again', 'local:ops', $6, $7)",
            )
            .bind(Uuid::now_v7())
            .bind(accounts[0])
            .bind(key)
            .bind(b"x".to_vec())
            .bind(amount)
            .bind(b"{}".to_vec())
            .bind(now)
        };
        let duplicate = again("wire-0", 5).execute(&mut conn).await;
        let zero = again("wire-new", 0).execute(&mut conn).await;
        let fresh = again("wire-new", 5).execute(&mut conn).await;
        (rows, [update.is_err(), delete.is_err(), duplicate.is_err(), zero.is_err(), fresh.is_ok()])
    });
    credits.sort_by(|a, b| a.2.cmp(&b.2));
    assert_eq!(after, credits, "every credit as it was");
    assert_eq!(refused, [true; 5], "update, delete, a reused key and a zero amount refused; a new credit taken");
}

/// The withdrawal graph (issue 29, migration 23): a database at migration 22 holding withdrawals
/// in three states with their transitions, ledger entries, attempts, reconciliation result, review
/// decision, return, idempotency records and jobs migrates with no row lost, every history row
/// carrying its withdrawal's account, the ledger exact, and the rules still holding.
async fn a_populated_withdrawal_graph_moves_to_account_keys_losing_nothing(backend: Backend) {
    let (url, _dir) = fresh_database(backend).await;
    migrate_to(&url, backend, 22).await;
    let at = |minutes: i64| chrono::Utc::now() - chrono::TimeDelta::days(1) + chrono::TimeDelta::minutes(minutes);
    let (alice, bob, operator) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    // Created in this order, so newest first is w3, w2, w1.
    let (w1, w2, w3) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let (j1, j2, j3, j4) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let (d2, d3, run, item) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let system = withdrawals::domain::AccountId::SYSTEM.0;
    let report = Uuid::now_v7();
    let lines: [Uuid; 3] = std::array::from_fn(|_| Uuid::now_v7());
    let exceptions: [Uuid; 4] = std::array::from_fn(|_| Uuid::now_v7());
    let keys: [Uuid; 2] = std::array::from_fn(|_| Uuid::now_v7());
    let t: Vec<Uuid> = (0..8).map(|_| Uuid::now_v7()).collect();
    const TABLES: [&str; 16] = [
        "withdrawals",
        "withdrawal_transitions",
        "ledger_entries",
        "idempotency_records",
        "provider_attempts",
        "reconciliation_results",
        "review_decisions",
        "payout_returns",
        "jobs",
        "dead_letters",
        "dead_letter_events",
        "open_dead_letters",
        "replay_items",
        "settlement_lines",
        "settlement_exceptions",
        "api_keys",
    ];
    let before: Vec<i64> = on_connection!(&url, |conn| {
        for (account, name) in [(alice, "Alice"), (bob, "Bob")] {
            exec!(conn, "INSERT INTO accounts (id, name, created_at) VALUES ($1, $2, $3)", account, name, at(0));
        }
        exec!(
            conn,
            "INSERT INTO operators (id, name, role, secret_hash, created_at) VALUES ($1, 'Ada', 'admin', $2, $3)",
            operator,
            vec![0_u8; 32],
            at(0)
        );
        // Alice: USD 1000.00 funded; w1 (2.50) paid then returned, w3 (1.00) failed.
        // Bob: EUR 500.00 funded; w2 (20.00) held, in review.
        for (account, currency, available, held) in [(alice, "USD", 100_000_i64, 0_i64), (bob, "EUR", 48_000, 2_000)] {
            exec!(
                conn,
                "INSERT INTO balances (account_id, currency, available, held, paid_out) VALUES ($1, $2, $3, $4, 0)",
                account,
                currency,
                available,
                held
            );
        }
        let withdrawals = [
            (w1, alice, "completed", 250_i64, "USD", "k1", 1),
            (w2, bob, "requires_review", 2_000, "EUR", "k2", 2),
            (w3, alice, "failed", 100, "USD", "k3", 3),
        ];
        for (id, account, status, amount, currency, key, minute) in withdrawals {
            exec!(
                conn,
                "INSERT INTO withdrawals (id, account_id, status, amount, currency, destination, reference,
                                          failure_code, version, idempotency_key, correlation_id, created_at,
                                          updated_at, sandbox)
                 VALUES ($1, $2, $3, $4, $5, $6, NULL, NULL, 3, $7, 'c', $8, $8, false)",
                id,
                account,
                status,
                amount,
                currency,
                sqlx::types::Json(
                    withdrawals::domain::Destination::parse("bank_account", "12345678", "021000021").unwrap(),
                ),
                key,
                at(minute)
            );
        }
        let transitions = [
            (t[0], w1, None, "pending"),
            (t[1], w1, Some("pending"), "processing"),
            (t[2], w1, Some("processing"), "completed"),
            (t[3], w2, None, "pending"),
            (t[4], w2, Some("pending"), "processing"),
            (t[5], w2, Some("processing"), "requires_review"),
            (t[6], w3, None, "pending"),
            (t[7], w3, Some("pending"), "failed"),
        ];
        for (n, (id, withdrawal, from, to)) in transitions.into_iter().enumerate() {
            exec!(
                conn,
                "INSERT INTO withdrawal_transitions (id, withdrawal_id, from_status, to_status, actor, reason,
                                                     correlation_id, at, evidence)
                 VALUES ($1, $2, $3, $4, 'worker:w', 'test', 'c', $5, NULL)",
                id,
                withdrawal,
                from,
                to,
                at(10 + n as i64)
            );
        }
        // (account, currency, kind, withdrawal, transition, [available, held, paid out], actor)
        type Entry = (Uuid, &'static str, &'static str, Option<Uuid>, Option<Uuid>, [i64; 3], Option<&'static str>);
        let entries: [Entry; 8] = [
            (alice, "USD", "funding", None, None, [100_000, 0, 0], Some("local:ops")),
            (alice, "USD", "hold", Some(w1), Some(t[0]), [-250, 250, 0], None),
            (alice, "USD", "settle", Some(w1), Some(t[2]), [0, -250, 250], None),
            (alice, "USD", "return", Some(w1), None, [250, 0, -250], None),
            (alice, "USD", "hold", Some(w3), Some(t[6]), [-100, 100, 0], None),
            (alice, "USD", "release", Some(w3), Some(t[7]), [100, -100, 0], None),
            (bob, "EUR", "funding", None, None, [50_000, 0, 0], Some("local:ops")),
            (bob, "EUR", "hold", Some(w2), Some(t[3]), [-2_000, 2_000, 0], None),
        ];
        for (n, (account, currency, kind, withdrawal, transition, [available, held, paid_out], actor)) in
            entries.into_iter().enumerate()
        {
            exec!(
                conn,
                "INSERT INTO ledger_entries (id, account_id, currency, kind, withdrawal_id, transition_id,
                                             available_delta, held_delta, paid_out_delta, created_at, actor)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                Uuid::now_v7(),
                account,
                currency,
                kind,
                withdrawal,
                transition,
                available,
                held,
                paid_out,
                at(20 + n as i64),
                actor
            );
        }
        for (account, key, withdrawal, state) in [
            (alice, "k1", Some(w1), "completed"),
            (bob, "k2", Some(w2), "completed"),
            (alice, "k9", None, "in_progress"),
        ] {
            exec!(
                conn,
                "INSERT INTO idempotency_records (account_id, key, fingerprint, state, response_status, response_body,
                                                  withdrawal_id, locked_at, created_at, expires_at)
                 VALUES ($1, $2, $3, $4, NULL, NULL, $5, $6, $6, $7)",
                account,
                key,
                key.as_bytes().to_vec(),
                state,
                withdrawal,
                at(1),
                at(60 * 48)
            );
        }
        for (job, withdrawal, status) in [(j1, w1, "succeeded"), (j2, w2, "dead")] {
            exec!(
                conn,
                "INSERT INTO jobs (id, queue, kind, payload, payload_version, status, run_at, correlation_id,
                                   withdrawal_id, created_at, updated_at)
                 VALUES ($1, 'payouts', 'submit_payout', $2, 1, $3, $4, 'c', $5, $4, $4)",
                job,
                b"{}".to_vec(),
                status,
                at(2),
                withdrawal
            );
        }
        for (withdrawal, job, outcome, side_effect) in [(w1, j1, "paid", "confirmed"), (w2, j2, "unknown", "unknown")] {
            exec!(
                conn,
                "INSERT INTO provider_attempts (id, withdrawal_id, job_id, attempt_no, worker_id, correlation_id,
                                                started_at, finished_at, outcome, side_effect)
                 VALUES ($1, $2, $3, 1, 'w', 'c', $4, $4, $5, $6)",
                Uuid::now_v7(),
                withdrawal,
                job,
                at(30),
                outcome,
                side_effect
            );
        }
        exec!(
            conn,
            "INSERT INTO reconciliation_results (id, withdrawal_id, job_id, result, detail, correlation_id, at)
             VALUES ($1, $2, $3, 'pending', 'still pending', 'c', $4)",
            Uuid::now_v7(),
            w2,
            j2,
            at(40)
        );
        exec!(
            conn,
            "INSERT INTO review_decisions (id, withdrawal_id, action, version, reason, requested_by, requested_at,
                                           request_evidence, status)
             VALUES ($1, $2, 'complete', 3, 'bank says paid', $3, $4, $5, 'pending')",
            Uuid::now_v7(),
            w2,
            operator,
            at(50),
            sqlx::types::Json(serde_json::json!({"verdict": "paid"}))
        );
        exec!(
            conn,
            "INSERT INTO payout_returns (id, withdrawal_id, account_id, currency, amount_minor, return_code,
                                         returned_at, evidence, recorded_at)
             VALUES ($1, $2, $3, 'USD', 250, 'R01', $4, $5, $4)",
            Uuid::now_v7(),
            w1,
            alice,
            at(55),
            sqlx::types::Json(serde_json::json!({"status": "returned"}))
        );
        // Migration 24's graph: w2's dead submit job, the daily import's dead job (no withdrawal),
        // their letters, a closed event, an open-set row, a replay run whose item released j4.
        exec!(
            conn,
            "INSERT INTO jobs (id, queue, kind, payload, payload_version, status, run_at, correlation_id,
                               withdrawal_id, created_at, updated_at)
             VALUES ($1, 'settlement', 'import_settlement', $2, 1, 'dead', $3, 'settlement-day', NULL, $3, $3)",
            j3,
            b"{}".to_vec(),
            at(3)
        );
        for (letter, job, withdrawal, category) in
            [(d2, j2, Some(w2), "side_effect_unknown"), (d3, j3, None, "infrastructure")]
        {
            exec!(
                conn,
                "INSERT INTO dead_letters (id, job_id, queue, job_type, payload_version, attempts, failed_at,
                                           error_code, error_class, error_message, worker_host, worker_version,
                                           correlation_id, withdrawal_id, side_effect_state, category, owner, runbook)
                 VALUES ($1, $2, 'payouts', 'submit_payout', 2, 3, $3, 'timeout', 'transient', 'timed out', 'h',
                         'v', 'c', $4, 'unknown', $5, 'payments', 'runbooks/x.md')",
                letter,
                job,
                at(45),
                withdrawal,
                category
            );
        }
        exec!(
            conn,
            "INSERT INTO dead_letter_events (id, dead_letter_id, action, actor, reason, at)
             VALUES ($1, $2, 'closed', 'operator:x', 'handled', $3)",
            Uuid::now_v7(),
            d3,
            at(46)
        );
        exec!(
            conn,
            "INSERT INTO open_dead_letters (dead_letter_id, category, error_code, failed_at)
             VALUES ($1, 'side_effect_unknown', 'timeout', $2)",
            d2,
            at(45)
        );
        exec!(
            conn,
            "INSERT INTO replay_runs (id, started_by, reason, selection, expected_payload_version, destination_queue,
                                      status, total, rate_per_second, max_concurrency, auto_pause_threshold,
                                      created_at, updated_at)
             VALUES ($1, $2, 'retry', $3, 2, 'reconciliation', 'running', 1, 1, 1, 1, $4, $4)",
            run,
            operator,
            sqlx::types::Json(serde_json::json!({"dead_letter_ids": [d2]})),
            at(47)
        );
        exec!(
            conn,
            "INSERT INTO replay_items (id, run_id, dead_letter_id, status, job_id, released_at, created_at)
             VALUES ($1, $2, $3, 'reconciling', $4, $5, $5)",
            item,
            run,
            d2,
            j4,
            at(48)
        );
        exec!(
            conn,
            "INSERT INTO jobs (id, queue, kind, payload, payload_version, status, run_at, correlation_id,
                               withdrawal_id, replay_item_id, created_at, updated_at)
             VALUES ($1, 'reconciliation', 'reconcile_payout', $2, 1, 'scheduled', $3, 'replay', $4, $5, $3, $3)",
            j4,
            b"{}".to_vec(),
            at(48),
            w2,
            item
        );
        // Migration 25's tables: a report whose lines are matched to w1, name w2 (upper case,
        // not matched yet) and name nothing of ours; exceptions on a withdrawal, on a line only,
        // and on both; an API key per account.
        exec!(
            conn,
            "INSERT INTO settlement_reports (id, report_date, version, digest, source, line_count, differences,
                                             imported_by, imported_at)
             VALUES ($1, '2026-12-01', 1, 'digest-1', 'file', 3, $2, 'ops', $3)",
            report,
            sqlx::types::Json(serde_json::json!({})),
            at(60)
        );
        let rows = [
            (lines[0], 1, w1.to_string(), Some(w1), Some("matched")),
            (lines[1], 2, w2.to_string().to_uppercase(), None, None),
            (lines[2], 3, "not-one-of-ours".to_owned(), None, None),
        ];
        for (id, line_no, key, withdrawal, result) in rows {
            exec!(
                conn,
                "INSERT INTO settlement_lines (id, report_id, line_no, line_key, content_digest, transfer_id,
                                               idempotency_key, reference, amount_minor, currency, fee_minor, status,
                                               event_at, withdrawal_id, result)
                 VALUES ($1, $2, $3, $4, 'd', $5, $6, 'r', 250, 'USD', 0, 'paid', $7, $8, $9)",
                id,
                report,
                line_no,
                format!("key-{line_no}"),
                format!("tr_{line_no}"),
                key,
                at(61),
                withdrawal,
                result
            );
        }
        let found = [
            (exceptions[0], "missing_from_report", Some(w1), None),
            (exceptions[1], "unknown_transfer", None, Some(lines[2])),
            (exceptions[2], "amount_mismatch", Some(w2), Some(lines[1])),
            (exceptions[3], "status_mismatch", None, Some(lines[1])),
        ];
        for (n, (id, kind, withdrawal, line)) in found.into_iter().enumerate() {
            exec!(
                conn,
                "INSERT INTO settlement_exceptions (id, kind, status, dedupe_key, withdrawal_id, line_id, detail,
                                                    evidence, opened_at)
                 VALUES ($1, $2, 'open', $3, $4, $5, 'x', $6, $7)",
                id,
                kind,
                format!("dedupe-{n}"),
                withdrawal,
                line,
                sqlx::types::Json(serde_json::json!({})),
                at(62)
            );
        }
        for (key, account) in [(keys[0], alice), (keys[1], bob)] {
            exec!(
                conn,
                "INSERT INTO api_keys (id, account_id, secret_hash, created_at, label) VALUES ($1, $2, $3, $4, 'k')",
                key,
                account,
                vec![1_u8; 32],
                at(0)
            );
        }
        let mut counts = Vec::new();
        for table in TABLES {
            counts
                .push(sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}")).fetch_one(&mut conn).await.unwrap());
        }
        counts
    });
    assert_eq!(before, [3, 8, 8, 3, 2, 1, 1, 1, 4, 2, 1, 1, 1, 3, 4, 2], "the seed");
    let rows_before = snapshot(&url, backend, &TABLES).await;

    let db = Db::connect(&url, &PoolSettings::default()).await.unwrap();
    db.migrate().await.unwrap();
    // The ledger is exact after the move, and the service reads the history by its keys.
    assert_eq!(withdrawals::storage::accounts::ledger_violations(&db).await.unwrap(), vec![]);
    let key = |account, id| withdrawals::domain::WithdrawalKey {
        account: withdrawals::domain::AccountId(account),
        id: withdrawals::domain::WithdrawalId(id),
    };
    let transitions = withdrawals::storage::withdrawals::transitions(&db, key(alice, w1)).await.unwrap();
    assert_eq!(transitions.len(), 3);
    assert!(withdrawals::storage::withdrawals::transitions(&db, key(bob, w1)).await.unwrap().is_empty());
    let pending = withdrawals::storage::review_decisions::pending_for(&db, key(bob, w2)).await.unwrap();
    assert_eq!(pending.map(|d| d.account_id.0), Some(bob));
    let page = withdrawals::storage::withdrawals::list(&db, withdrawals::domain::AccountId(alice), None, 10, None)
        .await
        .unwrap();
    assert_eq!(page.iter().map(|w| w.id.0).collect::<Vec<_>>(), [w3, w1], "newest first, one account's");
    db.close().await;
    // 0030 adds each attempt's provider: every earlier attempt went to the one provider, `default`.
    let after = snapshot_without(&url, backend, &TABLES, &["provider"]).await;
    assert_eq!(after, rows_before, "every row as it was, column by column");
    let providers: Vec<String> =
        on_connection!(&url, |conn| sqlx::query_scalar("SELECT DISTINCT provider FROM provider_attempts")
            .fetch_all(&mut conn)
            .await
            .unwrap());
    assert_eq!(providers, ["default"], "earlier attempts went to `default`");

    type Owners = Vec<(Uuid, Uuid)>;
    let (after, matching, owners, refused): (Vec<i64>, Vec<i64>, Owners, [bool; 5]) = on_connection!(&url, |conn| {
        let mut counts = Vec::new();
        for table in TABLES {
            counts
                .push(sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}")).fetch_one(&mut conn).await.unwrap());
        }
        // Every history row carries its withdrawal's account.
        let mut matching = Vec::new();
        for table in &TABLES[1..8] {
            matching.push(
                sqlx::query_scalar(&format!(
                    "SELECT COUNT(*) FROM {table} t JOIN withdrawals w ON w.id = t.withdrawal_id
                     WHERE t.account_id = w.account_id"
                ))
                .fetch_one(&mut conn)
                .await
                .unwrap(),
            );
        }
        // Every append-only table of the moved graph still refuses a rewrite and a deletion.
        let mut rewrite = Ok(());
        for table in
            ["withdrawal_transitions", "ledger_entries", "reconciliation_results", "payout_returns", "dead_letters"]
        {
            let id = format!("(SELECT id FROM {table} LIMIT 1)");
            for statement in [
                format!("UPDATE {table} SET account_id = account_id WHERE id = {id}"),
                format!("DELETE FROM {table} WHERE id = {id}"),
            ] {
                if sqlx::query(&statement).execute(&mut conn).await.is_ok() {
                    rewrite = Err(statement);
                }
            }
        }
        // A transition claiming w1 under Bob's account, a second pending decision on w2, and a
        // second return of w1 are refused.
        let foreign = sqlx::query(
            "INSERT INTO withdrawal_transitions (id, account_id, withdrawal_id, from_status, to_status, actor, reason,
                                                 correlation_id, at)
             VALUES ($1, $2, $3, 'completed', 'completed', 'x', 'x', 'x', $4)",
        )
        .bind(Uuid::now_v7())
        .bind(bob)
        .bind(w1)
        .bind(at(70))
        .execute(&mut conn)
        .await;
        let second_decision = sqlx::query(
            "INSERT INTO review_decisions (id, account_id, withdrawal_id, action, version, reason, requested_by,
                                           requested_at, request_evidence, status)
             VALUES ($1, $2, $3, 'fail', 3, 'again', $4, $5, $6, 'pending')",
        )
        .bind(Uuid::now_v7())
        .bind(bob)
        .bind(w2)
        .bind(operator)
        .bind(at(71))
        .bind(sqlx::types::Json(serde_json::json!({})))
        .execute(&mut conn)
        .await;
        let second_return = sqlx::query(
            "INSERT INTO payout_returns (id, withdrawal_id, account_id, currency, amount_minor, return_code,
                                         returned_at, evidence, recorded_at)
             VALUES ($1, $2, $3, 'USD', 250, 'R01', $4, $5, $4)",
        )
        .bind(Uuid::now_v7())
        .bind(w1)
        .bind(alice)
        .bind(at(72))
        .bind(sqlx::types::Json(serde_json::json!({})))
        .execute(&mut conn)
        .await;
        // Whose each job, letter, event, open-set row and replay item is now.
        let owners: Vec<(Uuid, Uuid)> = sqlx::query_as(
            "SELECT id, account_id FROM jobs
             UNION ALL SELECT id, account_id FROM dead_letters
             UNION ALL SELECT dead_letter_id, account_id FROM dead_letter_events
             UNION ALL SELECT dead_letter_id, account_id FROM open_dead_letters
             UNION ALL SELECT id, account_id FROM replay_items
             UNION ALL SELECT id, account_id FROM settlement_lines
             UNION ALL SELECT id, account_id FROM settlement_exceptions
             UNION ALL SELECT id, account_id FROM api_keys",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        // An event filed under another account than its letter's is refused; under its own, taken.
        let event = |account: Uuid| {
            sqlx::query(
                "INSERT INTO dead_letter_events (id, account_id, dead_letter_id, action, actor, reason, at)
                 VALUES ($1, $2, $3, 'replayed', 'x', 'x', $4)",
            )
            .bind(Uuid::now_v7())
            .bind(account)
            .bind(d2)
            .bind(at(73))
        };
        let misfiled = event(alice).execute(&mut conn).await;
        event(bob).execute(&mut conn).await.unwrap();
        let refused =
            [rewrite.is_ok(), foreign.is_err(), second_decision.is_err(), second_return.is_err(), misfiled.is_err()];
        (counts, matching, owners, refused)
    });
    assert_eq!(after, before, "no row lost or added");
    // Every history row with a withdrawal (all but the two funding entries and the claimed-only
    // key) carries its withdrawal's account.
    assert_eq!(matching, [8, 6, 2, 2, 1, 1, 1], "every history row carries its withdrawal's account");
    assert_eq!(
        refused, [true; 5],
        "no append-only row rewritten or deleted; another account's transition, a second decision, a second return \
         and a misfiled event refused"
    );
    // Jobs take their withdrawal's account, or the system account's; letters, events, open rows
    // and replay items their job's or letter's.
    let owners: BTreeSet<(Uuid, Uuid)> = owners.into_iter().collect();
    let expected = BTreeSet::from([
        (j1, alice),
        (j2, bob),
        (j3, system),
        (j4, bob),
        (d2, bob),
        (d3, system),
        (item, bob),
        // A line takes the account of the withdrawal it is matched to or names; else the system's.
        (lines[0], alice),
        (lines[1], bob),
        (lines[2], system),
        // An exception its withdrawal's, else its line's.
        (exceptions[0], alice),
        (exceptions[1], system),
        (exceptions[2], bob),
        (exceptions[3], bob),
        (keys[0], alice),
        (keys[1], bob),
    ]);
    assert_eq!(owners, expected, "every job and letter with its account");
}

mod populated_migration {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::a_populated_database_moves_to_account_keys_losing_nothing(super::Backend::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::a_populated_database_moves_to_account_keys_losing_nothing(super::Backend::Postgres).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn withdrawal_graph_sqlite() {
        super::a_populated_withdrawal_graph_moves_to_account_keys_losing_nothing(super::Backend::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn withdrawal_graph_postgres() {
        super::a_populated_withdrawal_graph_moves_to_account_keys_losing_nothing(super::Backend::Postgres).await
    }
}

/// The checker names each kind of mistake (so the schema test cannot pass by checking nothing).
#[test]
fn the_check_names_each_mistake() {
    let fk = |columns: &[&str], target: &str, target_columns: &[&str]| ForeignKey {
        columns: columns.iter().map(|c| c.to_string()).collect(),
        target: target.into(),
        target_columns: target_columns.iter().map(|c| c.to_string()).collect(),
    };
    let cols = |names: &[&str]| names.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    let table = |columns: &[(&str, bool)], pk: &[&str], uniques: &[(&str, &[&str])], fks: Vec<ForeignKey>| Table {
        columns: columns.iter().map(|(c, n)| (c.to_string(), *n)).collect(),
        primary_key: cols(pk),
        uniques: uniques.iter().map(|(n, c)| (n.to_string(), cols(c))).collect(),
        foreign_keys: fks,
    };
    let schema = BTreeMap::from([
        ("accounts".to_owned(), table(&[("id", true)], &["id"], &[], vec![])),
        (
            "good".to_owned(),
            table(
                &[("account_id", true), ("id", true)],
                &["account_id", "id"],
                &[("good_key", &["account_id", "id"])],
                vec![fk(&["account_id"], "accounts", &["id"]), fk(&["by"], "people", &["id"])],
            ),
        ),
        (
            "bad".to_owned(),
            table(
                &[("account_id", false), ("id", true), ("good_id", true)],
                &["id"],
                &[("bad_key", &["id"])],
                vec![fk(&["good_id"], "good", &["id"]), fk(&["log_id"], "log", &["id"])],
            ),
        ),
        (
            "people".to_owned(),
            table(
                &[("id", true)],
                &["id"],
                &[],
                vec![
                    fk(&["good_id"], "good", &["id"]),
                    fk(&["log_id"], "log", &["id"]),
                    fk(&["x"], "nowhere", &["id"]),
                ],
            ),
        ),
        ("log".to_owned(), table(&[("id", true)], &["id"], &[], vec![])),
        ("stray".to_owned(), table(&[("id", true)], &["id"], &[], vec![])),
    ]);
    let kinds = BTreeMap::from([
        ("accounts".to_owned(), Kind::PerAccount),
        ("good".to_owned(), Kind::PerAccount),
        ("bad".to_owned(), Kind::PerAccount),
        ("people".to_owned(), Kind::Reference),
        ("log".to_owned(), Kind::Local),
        ("gone".to_owned(), Kind::Local),
    ]);
    let found = violations(&schema, &kinds);
    assert_eq!(found.keys().collect::<Vec<_>>(), ["bad", "gone", "people", "stray"], "{found:#?}");
    let bad = messages(&found["bad"]);
    for wanted in [
        "`account_id` may be NULL",
        "primary key (id) lacks",
        "unique `bad_key`",
        "(good_id) → good does not pair the accounts",
        "cannot reference a coordinator-local one",
    ] {
        assert!(bad.contains(wanted), "{wanted}: {bad}");
    }
    let people = messages(&found["people"]);
    for wanted in [
        "a global table cannot reference a per-account one",
        "a reference table cannot reference a coordinator-local one",
        "→ nowhere: the target is not classified",
    ] {
        assert!(people.contains(wanted), "{wanted}: {people}");
    }
    assert_eq!(messages(&found["stray"]), "not classified in the README");
    assert_eq!(messages(&found["gone"]), "in the README but not in the schema");
    // What the ratchet may tolerate on a listed table, and what it never does.
    let tolerated: Vec<bool> = found["bad"].iter().map(|f| f.unkeyed).collect();
    assert_eq!(tolerated, [false, true, true, true, false], "{:#?}", found["bad"]);
    let readme = documented();
    assert_eq!(readme.get("withdrawals"), Some(&Kind::PerAccount));
    assert_eq!(readme.get("operators"), Some(&Kind::Reference));
    assert_eq!(readme.get("audit_log"), Some(&Kind::Local));
}

async fn postgres_schema(url: &str) -> BTreeMap<String, Table> {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let mut schema: BTreeMap<String, Table> = BTreeMap::new();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() AND tablename <> '_sqlx_migrations'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for name in tables {
        schema.insert(name, Table::default());
    }
    let columns: Vec<(String, String, bool)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text, is_nullable = 'NO' FROM information_schema.columns
         WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for (table, column, not_null) in columns {
        if let Some(t) = schema.get_mut(&table) {
            t.columns.push((column, not_null));
        }
    }
    let uniques: Vec<(String, String, bool, Vec<String>)> = sqlx::query_as(
        "SELECT t.relname::text, i.relname::text, x.indisprimary,
                ARRAY(SELECT COALESCE(a.attname::text, '(expression)')
                      FROM unnest(x.indkey) WITH ORDINALITY k(attnum, n)
                      LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
                      WHERE k.n <= x.indnkeyatts ORDER BY k.n)
         FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
         JOIN pg_namespace n ON n.oid = t.relnamespace
         WHERE n.nspname = current_schema() AND x.indisunique",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for (table, index, primary, columns) in uniques {
        if let Some(t) = schema.get_mut(&table) {
            if primary {
                t.primary_key = columns;
            } else {
                t.uniques.push((index, columns));
            }
        }
    }
    let foreign: Vec<(String, String, Vec<String>, Vec<String>)> = sqlx::query_as(
        "SELECT t.relname::text, f.relname::text,
                ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY k(attnum, n)
                      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum ORDER BY k.n),
                ARRAY(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY k(attnum, n)
                      JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum ORDER BY k.n)
         FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid JOIN pg_class f ON f.oid = c.confrelid
         JOIN pg_namespace n ON n.oid = t.relnamespace
         WHERE c.contype = 'f' AND n.nspname = current_schema()",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for (table, target, columns, target_columns) in foreign {
        if let Some(t) = schema.get_mut(&table) {
            t.foreign_keys.push(ForeignKey { columns, target, target_columns });
        }
    }
    schema
}

async fn sqlite_schema(url: &str) -> BTreeMap<String, Table> {
    let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut schema = BTreeMap::new();
    for name in &names {
        let columns: Vec<(String, bool, i64)> =
            sqlx::query_as("SELECT name, \"notnull\" <> 0, pk FROM pragma_table_info($1)")
                .bind(name)
                .fetch_all(&mut conn)
                .await
                .unwrap();
        let mut primary: Vec<(i64, String)> =
            columns.iter().filter(|(_, _, pk)| *pk > 0).map(|(c, _, pk)| (*pk, c.clone())).collect();
        primary.sort();
        // A primary-key column counts as NOT NULL here, as PostgreSQL makes it (SQLite's rowid tables
        // let a non-INTEGER key column hold NULL, a legacy quirk: `accounts.id` is such a column on
        // SQLite). The property matters for the distributed PostgreSQL, whose run of this test reads
        // the declared constraint.
        let mut table = Table {
            columns: columns.iter().map(|(c, not_null, pk)| (c.clone(), *not_null || *pk > 0)).collect(),
            primary_key: primary.into_iter().map(|(_, c)| c).collect(),
            ..Table::default()
        };
        let indexes: Vec<(String, String)> =
            sqlx::query_as("SELECT name, origin FROM pragma_index_list($1) WHERE \"unique\" <> 0")
                .bind(name)
                .fetch_all(&mut conn)
                .await
                .unwrap();
        for (index, _) in indexes.into_iter().filter(|(_, origin)| origin != "pk") {
            let columns: Vec<Option<String>> =
                sqlx::query_scalar("SELECT name FROM pragma_index_info($1) ORDER BY seqno")
                    .bind(&index)
                    .fetch_all(&mut conn)
                    .await
                    .unwrap();
            table.uniques.push((index, columns.into_iter().map(|c| c.unwrap_or("(expression)".into())).collect()));
        }
        let keys: Vec<(i64, String, String, Option<String>)> =
            sqlx::query_as("SELECT id, \"table\", \"from\", \"to\" FROM pragma_foreign_key_list($1) ORDER BY id, seq")
                .bind(name)
                .fetch_all(&mut conn)
                .await
                .unwrap();
        let mut by_id: BTreeMap<i64, ForeignKey> = BTreeMap::new();
        for (id, target, from, to) in keys {
            let fk = by_id.entry(id).or_insert_with(|| ForeignKey {
                columns: vec![],
                target: target.clone(),
                target_columns: vec![],
            });
            fk.columns.push(from);
            fk.target_columns.push(to.unwrap_or_else(|| "(primary key)".into()));
        }
        table.foreign_keys = by_id.into_values().collect();
        schema.insert(name.clone(), table);
    }
    // A foreign key that names no target columns references the target's primary key.
    let primary: BTreeMap<String, Vec<String>> =
        schema.iter().map(|(name, t)| (name.clone(), t.primary_key.clone())).collect();
    for table in schema.values_mut() {
        for fk in &mut table.foreign_keys {
            if fk.target_columns.iter().all(|c| c == "(primary key)") {
                if let Some(pk) = primary.get(&fk.target) {
                    fk.target_columns = pk.clone();
                }
            }
        }
    }
    schema
}
