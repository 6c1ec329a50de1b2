//! `withdrawals` — pays out customer withdrawals through an external payout provider and
//! recovers every failure without losing or doubling money.
//!
//! # Module map
//! - [`domain`] — values and rules: `Amount`, `Currency`, `Destination`, typed ids, the
//!   withdrawal and replay-run state machines, the stored states (job, side effect,
//!   reconciliation result, dead-letter category) and the job kinds and payloads. Pure: no I/O.
//!   The bottom of the module graph (see "Layers" below).
//! - [`storage`] — all SQL, for SQLite and PostgreSQL behind one API: accounts, balances and the
//!   ledger, withdrawals and guarded transitions, idempotency records, credentials, jobs, breaker
//!   overrides and reports; [`storage::batch`] sends a transaction's independent writes as one
//!   statement.
//! - [`http`] — the customer API (axum), problem+json errors, correlation ids, OpenAPI, health,
//!   the application state and the layers every route shares; [`http::limits`]: every
//!   listener's timeouts, connection cap and `/metrics` access; [`http::ops`]: the `/ops/v1`
//!   handlers (thin) and the extractors that check roles (`Authorized<A>`), bodies and queries.
//! - [`jobs`] — job kinds, queues and payloads; the durable worker and its group commit of
//!   completions; the submit-payout and reconciliation handlers; retry policies.
//! - [`dead_letter`] — failure categories, owners and runbooks; the redacted dead-letter envelope.
//! - [`redact`] — the one set of redaction rules for dead letters and logs.
//! - [`provider`] — the payout provider: HTTP client, outcome classification, circuit breaker;
//!   [`provider::truth`]: every transfer checked against the withdrawal, one verdict for all;
//!   [`provider::cluster`]: each process obeys the stored breaker override and reports its breaker.
//! - [`credentials`] — issuing and verifying hashed bearer credentials (API keys, operator tokens).
//! - [`provisioning`] — creating accounts and operators with credentials (CLI and tests).
//! - [`config`] — runtime settings and their defaults.
//! - [`startup`] — the composition root: opening the database, provider and breaker, the
//!   complete router (customer API + `/ops/v1` + console), and the `serve`/`worker` process
//!   (workers, listeners, shutdown). Used by the CLI, the tools and the tests alike.
//! - [`cli`] — the `withdrawals` command line: parses and dispatches (serve, worker, migrate,
//!   accounts, operators); [`ops_cli`] — its operator commands (status, breakers, review, dlq,
//!   replay, audit), clients of `/ops/v1`.
//! - [`chaos`] — `withdrawals chaos`: processes, faults, load, the settlement phase, and the invariant
//!   checks.
//! - [`bench`](mod@bench) — `withdrawals bench`: pgbench ceiling, end-to-end, latency, queue, dead letters, memory.
//! - [`telemetry`] — tracing set-up (pretty or JSON, always redacted); [`metrics`] — metric names
//!   (one catalogue), recording, `/metrics`, the database-gauge refresher.
//! - [`ops`] — the operator core, free of HTTP: one typed function per operator action (review,
//!   two-person decisions, dead-letter triage, replays, audit, overview, credentials) holding the
//!   role check, the rules and the audit row; answers in [`ops::types`], failures as
//!   [`ops::OpsError`]. Used by `http::ops`, the console and (over HTTP) the CLI.
//! - [`console`] — the operator console: server-rendered pages under `/ops` (sign-in, overview,
//!   review, dead letters, replays, audit) that call the operator core directly as the signed-in
//!   operator; every form post goes through the CSRF extractor (`CsrfForm`).
//!
//! # Layers
//! Top to bottom, each module uses only modules below it (checked by `tests/layering.rs`;
//! `scripts/module-deps` prints the graph): `cli` → `ops_cli`, `bench` → `startup` → `console` →
//! `http` → `ops` → `jobs` → `provider`, `dead_letter` → `metrics` → `storage` → `config`,
//! `redact` → `domain` (with `chaos`, `provisioning`, `telemetry` and `credentials` at the side).
//!
//! Outside the crate: `runbooks/` (alert rules and on-call pages), `provider-mocks/` (the
//! provider mock), `http-guard/` (the connection cap and header/idle timeouts both listen with),
//! `fuzz/` (fuzz targets).

/// This build: the crate version and the git commit it was built from (`build.rs`; "unknown"
/// outside a git checkout), e.g. `0.1.0+4bb31bb0a1c2`. The dead-letter envelope's
/// `worker_version`, `withdrawals --version`, and the breaker view's processes.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("WITHDRAWALS_GIT_COMMIT"));

pub mod bench;
pub mod chaos;
pub mod cli;
pub mod config;
pub mod console;
pub mod credentials;
pub mod dead_letter;
pub mod domain;
pub mod http;
pub mod jobs;
pub mod metrics;
pub mod ops;
pub mod ops_cli;
pub mod provider;
pub mod provisioning;
pub mod redact;
pub mod startup;
pub mod storage;
pub mod telemetry;
