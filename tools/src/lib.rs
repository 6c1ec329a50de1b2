//! `withdrawals-tools` — what surrounds the service but never runs in it: the chaos run and the
//! benchmarks, built on the `withdrawals` library's public API and driving the `withdrawals`
//! binary as processes. The production crate neither contains nor links any of it.
//!
//! # Module map
//! - [`chaos`] — `withdrawals-tools chaos` (SPEC §11): processes, faults, load, the settlement
//!   phase, and the invariant checks.
//! - [`bench`](mod@bench) — `withdrawals-tools bench` (SPEC §12): pgbench ceiling, end-to-end,
//!   latency, queue, dead letters, memory.
//! - [`store`] — the SQL only the tools send: progress counts, set-based seeding, planner
//!   statistics and plans ([`store::bench`]); the chaos run's reads of webhook events and final
//!   decisions ([`store::chaos`]); creating and dropping throwaway PostgreSQL databases
//!   ([`store::server`], also used by the test harness).
//! - [`cli`] — the `withdrawals-tools` command line.
//!
//! Layers, top to bottom: `cli`; `bench`; `chaos`; `store`; then the `withdrawals` library.

pub mod bench;
pub mod chaos;
pub mod cli;
pub mod store;
