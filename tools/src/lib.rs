//! `withdrawals-tools` — what surrounds the service but never runs in it: the chaos run and the
//! benchmarks, built on the `withdrawals` library's public API and driving the `withdrawals`
//! binary as processes. The production crate neither contains nor links any of it.
//!
//! # Module map
//! - [`chaos`] — `withdrawals-tools chaos` (SPEC §11): processes ([`chaos::procs`]), faults and
//!   quiet (`chaos::control`), load ([`chaos::load`]), the scripted operators
//!   ([`chaos::operator`]), the webhook slice ([`chaos::webhooks`]), the settlement phase
//!   ([`chaos::settlement`]), and the invariant checks ([`chaos::checks`]). With `--providers 2`
//!   (SPEC §16): two provider mocks, their `PROVIDERS` file and the first's outage
//!   ([`chaos::providers`]), the TCP proxy that makes its port refuse connections
//!   (`chaos::proxy`), and the failover checks ([`chaos::two_providers`]); webhooks and
//!   settlement then run and are checked per provider.
//! - [`bench`](mod@bench) — `withdrawals-tools bench` (SPEC §12): pgbench ceiling, end-to-end,
//!   latency, queue, dead letters, memory.
//! - [`store`] — the SQL only the tools send: progress counts, set-based seeding, planner
//!   statistics and plans ([`store::bench`]); the chaos run's reads ([`store::chaos`]): each
//!   provider's webhook events and their jobs, final decisions with the provider their evidence
//!   names, every attempt and its provider, the failover moves and the transition logs of the
//!   withdrawals that moved; creating and dropping throwaway PostgreSQL databases
//!   ([`store::server`], also used by the test harness). The library's `storage::verify` holds
//!   the whole-database reads the chaos checks share with the service's tests (settlement reports,
//!   lines and exceptions by provider among them).
//! - [`cli`] — the `withdrawals-tools` command line.
//!
//! Layers, top to bottom: `cli`; `bench`; `chaos`; `store`; then the `withdrawals` library.

pub mod bench;
pub mod chaos;
pub mod cli;
pub mod store;
