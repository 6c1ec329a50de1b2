//! What the service knows about a payout at the provider: an attempt's side effect, and what a
//! reconciliation found. Stored as TEXT on attempts, dead letters and reconciliation results.

use crate::text_enum;

text_enum! {
    /// An attempt's side effect at the provider, as far as we know.
    pub enum SideEffect("side effect", 3) {
        /// The provider refused before executing, or was never called.
        NotStarted = "not_started",
        /// The provider executed it.
        Confirmed = "confirmed",
        /// It may or may not have happened: only reconciliation may follow, never a blind resend.
        Unknown = "unknown",
    }
}

text_enum! {
    /// One answer of reconciliation (SPEC §7).
    pub enum ReconciliationResult("reconciliation result", 9) {
        Paid = "paid",
        Failed = "failed",
        Pending = "pending",
        /// No transfer under the operation key.
        NotFound = "not_found",
        /// The provider could not be asked.
        Unavailable = "unavailable",
        /// The reconciliation window ran out before a definite answer.
        WindowExpired = "window_expired",
        Skipped = "skipped",
        /// The provider's transfer differs from the withdrawal.
        Mismatch = "mismatch",
        /// Paid, then returned by the receiving bank.
        Returned = "returned",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_values_round_trip_through_their_names() {
        crate::assert_text_enum_round_trips!(SideEffect);
        crate::assert_text_enum_round_trips!(ReconciliationResult);
    }
}
