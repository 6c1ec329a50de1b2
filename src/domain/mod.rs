//! The withdrawal domain: values, states and the rules between them.
//!
//! Everything here is pure — no I/O, no clock, no randomness — so every rule can be tested
//! exhaustively and reused by the HTTP layer, the storage layer and (later) the workers.

mod destination;
mod idempotency;
mod ids;
mod money;
mod reference;
mod role;
mod status;
mod withdrawal;

pub use destination::mask_account_number;
pub use destination::{Destination, DestinationError};
pub use idempotency::{IdempotencyKey, IdempotencyKeyError};
pub use ids::{AccountId, JobId, OperatorId, WithdrawalId};
pub use money::format_minor;
pub use money::{Amount, AmountError, AmountLimits, Currency};
pub use reference::{check_reference, ReferenceError, MAX_REFERENCE_CHARS};
pub use role::Role;
pub use status::{check_transition, Actor, LedgerEffect, TransitionError, UnknownStatus, WithdrawalStatus};
pub use withdrawal::Withdrawal;
