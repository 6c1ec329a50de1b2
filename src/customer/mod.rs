//! The customer core (SPEC §3): every customer action — create a withdrawal under an idempotency
//! key, read, list, cancel, read balances — as typed service functions. The customer API
//! (`http::withdrawals`, `http::balances`) only extracts the request, calls one of these and
//! serialises the answer, as `http::ops` does for [`crate::ops`].
//!
//! Free of HTTP. Each function takes the [`Customers`] context and the calling account, applies
//! the rules (parse, don't validate; the idempotency phases; which states may be cancelled) and
//! answers with the DTOs of [`types`] or a [`ServiceError`] whose refusal the routes map to
//! problem+json. Owns no SQL: storage does. Every transition storage applies is counted there,
//! once its transaction commits.

pub mod balances;
pub mod notifications;
pub mod types;
pub mod withdrawals;

pub use crate::refusal::{ServiceError, ServiceResult};

use crate::config::AppConfig;
use crate::storage::Db;

/// What every customer action runs against: the database and the settings.
#[derive(Clone, Copy)]
pub struct Customers<'a> {
    pub db: &'a Db,
    pub config: &'a AppConfig,
}
