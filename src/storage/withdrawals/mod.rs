//! Withdrawals and their transitions (SPEC §1.1).
//!
//! Creation holds the funds, inserts the withdrawal, records its first transition and enqueues
//! its submit job — all in the caller's transaction. Every later state change goes through
//! [`transition`], the guarded compare-and-set write: zero rows updated means someone else moved
//! the withdrawal first, and the caller is told so instead of overwriting it.

mod create;
mod rows;
mod transitions;

pub use create::*;
pub use rows::*;
pub use transitions::*;
