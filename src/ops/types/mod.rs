//! The operator core's answers, typed: what `/ops/v1` serialises, what the console renders and
//! what the CLI deserialises — one definition each, so renaming a field is a compile error in
//! every client, not a silent `null`.
//!
//! Field names are the wire contract of SPEC §8 (README "Operator API"); every type is
//! `Serialize + Deserialize` so the CLI reads exactly what the API wrote.
//!
//! One file per area; every type is re-exported here, so a type's path is `ops::types::Name`
//! whichever file holds it.

mod credentials;
mod dead_letters;
mod notifications;
mod overview;
mod queries;
mod replays;
mod review;
mod settlement;
mod webhooks;

pub use credentials::*;
pub use dead_letters::*;
pub use notifications::*;
pub use overview::*;
pub use queries::*;
pub use replays::*;
pub use review::*;
pub use settlement::*;
pub use webhooks::*;

use serde::{Deserialize, Serialize};

/// One page of a list, with the cursor for the next page when there is one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Page<T> {
    pub data: Vec<T>,
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// A complete list (no paging).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct List<T> {
    pub data: Vec<T>,
}
