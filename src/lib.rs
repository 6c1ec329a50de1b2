//! `withdrawals` — pays out customer withdrawals through an external payout provider and
//! recovers every failure without losing or doubling money.
//!
//! # Module map
//! - [`domain`] — values and rules, no I/O: `Amount`/`Currency` (exact decimals), `Destination`,
//!   typed ids, the withdrawal state machine (`check_transition`: one exhaustive match) and the
//!   replay-run one, the stored states as enums (`JobStatus`, `SideEffect`,
//!   `ReconciliationResult`, dead-letter `Category`), job kinds and queues (`JobKind`, `Queue`,
//!   `JobType`) and their payloads, `Role`, the settlement report parser and kinds, the ledger's
//!   `EntryKind`, and `Evidence` (what a money decision rested on, written and read as one type).
//! - [`storage`] — every SQL statement, for SQLite and PostgreSQL behind one API: accounts,
//!   balances and the ledger, withdrawals and guarded transitions (each applied one counted on
//!   commit), idempotency records, credentials, jobs, dead letters, reconciliations, replays,
//!   audit, metric gauges, verification reads, returns, settlement; [`storage::batch`] sends a
//!   transaction's independent writes as one statement.
//! - [`customer`] — the customer core, free of HTTP: create (with the idempotency phases), read,
//!   list and cancel withdrawals, read balances; answers in [`customer::types`], failures as
//!   [`refusal::ServiceError`].
//! - [`ops`] — the operator core, free of HTTP: one typed function per operator action (review
//!   with decisions checked live against the provider, the two-person rule, dead-letter triage,
//!   replays, audit, overview, breakers, credentials, credits, ledger verification, settlement)
//!   holding the role check, the rules and the audit row; actions as types ([`ops::acts`]);
//!   answers in [`ops::types`], failures as [`ops::OpsError`].
//! - [`webhooks`] — the provider's signed events (SPEC §15), free of HTTP: the signature and
//!   timestamp checked, the event stored with the job that decides on it (`jobs::webhook`, on
//!   the provider's own record through `provider::truth::on_event`), or refused storing nothing.
//! - Customer notifications (SPEC §17) live where their parts belong: the events outbox, endpoints
//!   and deliveries in [`storage::notifications`] (an event written by the change's own
//!   transaction), the customer's side in [`customer::notifications`], the dispatcher and the
//!   delivery job in [`jobs::notify`], the operator's side in `ops::notifications`.
//! - [`refusal`] — what a service function (customer or operator) answers when it does not
//!   succeed: a refusal with a stable code and kind, or an internal failure.
//! - [`http`] — the customer API (axum; thin handlers over [`customer`]), problem+json errors,
//!   correlation ids, auth, OpenAPI, health, the application state and the layers every route
//!   shares; [`http::limits`]: every listener's timeouts, connection cap and `/metrics` access;
//!   [`http::ops`]: the `/ops/v1` handlers (extract, call [`ops`], serialise) and the extractors
//!   that check roles (`Authorized<A>`), bodies and queries; [`http::webhooks`]: the provider's
//!   `POST /webhooks/provider`. It does not know the console.
//! - [`console`] — the operator console: server-rendered pages under `/ops` (sign-in, overview,
//!   review, dead letters, replays, settlement, audit) that call the operator core directly as
//!   the signed-in operator; every form post goes through the CSRF extractor (`CsrfForm`).
//! - [`jobs`] — the durable worker (claim, lease, fencing, reaper, sweep, shutdown) and its group
//!   commit of completions; what a handler is given ([`jobs::context`]); the submit-payout and
//!   reconciliation handlers, batched first payouts ([`jobs::payout_batch`]), settlement
//!   reconciliation ([`jobs::settlement`]), provider events ([`jobs::webhook`]), which provider
//!   a payout goes to and the failover move ([`jobs::routing`], SPEC §16), the replay
//!   releaser; payload migrations; retry policies.
//! - [`dead_letter`] — failure categories, owners and runbooks; the redacted dead-letter
//!   envelope; `bury`, the one way a job dies.
//! - [`redact`] — the one set of redaction rules for dead letters and logs.
//! - [`provider`] — the payout providers: HTTP client, outcome classification, circuit breaker,
//!   one [`provider::Gateway`] per provider and the set routing reads ([`provider::Gateways`]);
//!   [`provider::truth`]: every transfer checked against the withdrawal, one verdict for all;
//!   [`provider::cluster`]: each process obeys the stored breaker override and reports its breaker.
//! - [`outbound`] — requests to URLs someone else supplied (customers' notification endpoints):
//!   https only, public addresses only (checked at registration and again at connect time), no
//!   redirects, no proxies, a bounded answer.
//! - [`credentials`] — issuing and verifying hashed bearer credentials (API keys, operator tokens),
//!   and sealing notification endpoints' signing secrets (AES-256-GCM).
//! - [`provisioning`] — creating accounts and operators with credentials (CLI and tests).
//! - [`config`] — runtime settings and their defaults.
//! - [`startup`] — the composition root: opening the database, provider and breaker, the
//!   complete router (customer API + `/ops/v1` + console), and the `serve`/`worker` process
//!   (workers, listeners, purges, shutdown). Used by the CLI, the tools and the tests alike.
//! - [`cli`] — the `withdrawals` command line: parses and dispatches (serve, worker, migrate,
//!   accounts, operators); [`ops_cli`] — its operator commands (status, breakers, review, dlq,
//!   replay, audit, credits, settlement, ledger), clients of `/ops/v1`.
//! - [`telemetry`] — tracing set-up (pretty or JSON, always redacted).
//! - [`metrics`] — metric names (one catalogue), recording, the Prometheus recorder. Below
//!   storage: storage counts every applied transition through it, on commit.
//! - [`gauges`] — the database gauges and the ledger check, refreshed on an interval.
//!
//! # Layers
//! Top to bottom: a module uses only modules on lower lines, never one on its own line
//! (`tests/layering.rs` reads this list and checks it, and that no two files of one module import
//! each other around a circle; `scripts/module-deps` prints the graph):
//! 1. `cli`
//! 2. `ops_cli`
//! 3. `startup`
//! 4. `console`, `provisioning`, `gauges`, `telemetry`
//! 5. `http`
//! 6. `customer`, `ops`, `webhooks`
//! 7. `jobs`
//! 8. `provider`, `outbound`
//! 9. `dead_letter`
//! 10. `refusal`, `credentials`
//! 11. `storage`
//! 12. `metrics`, `config`, `redact`
//! 13. `domain`
//!
//! Outside the crate: `tools/` (the `withdrawals-tools` crate: the chaos run and the benchmarks,
//! on this library's public API; the production binary neither contains nor links them),
//! `runbooks/` (alert rules and on-call pages), `provider-mocks/` (the
//! provider mock), `provider-contract/` (the contract values the service and the mock share),
//! `http-guard/` (the connection cap and header/idle timeouts both listen with),
//! `fuzz/` (fuzz targets).

/// This build: the crate version and the git commit it was built from (`build.rs`; "unknown"
/// outside a git checkout), e.g. `0.1.0+4bb31bb0a1c2`. The dead-letter envelope's
/// `worker_version`, `withdrawals --version`, and the breaker view's processes.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("WITHDRAWALS_GIT_COMMIT"));

pub mod cli;
pub mod config;
pub mod console;
pub mod credentials;
pub mod customer;
pub mod dead_letter;
pub mod domain;
pub mod gauges;
pub mod http;
pub mod jobs;
pub mod metrics;
pub mod ops;
pub mod ops_cli;
pub mod outbound;
pub mod provider;
pub mod provisioning;
pub mod redact;
pub mod refusal;
pub mod startup;
pub mod storage;
pub mod telemetry;
pub mod webhooks;
