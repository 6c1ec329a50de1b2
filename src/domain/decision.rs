//! A review decision (SPEC §8): what an operator may decide about a withdrawal in review, and a
//! requested decision's life under the two-person rule: pending until a second operator approves
//! or rejects it, or superseded when the withdrawal left review another way.

use crate::text_enum;

text_enum! {
    /// What an operator may decide about a withdrawal in review.
    pub enum ReviewAction("review action", 4) {
        /// The provider paid it: complete, naming the provider's transfer.
        Complete = "complete",
        /// The provider did not and will not pay it: fail and release the hold.
        Fail = "fail",
        /// Nothing was paid: send it again under the same operation key.
        Retry = "retry",
        /// Ask the provider again (a reconciliation job).
        Reconcile = "reconcile",
    }
}

text_enum! {
    /// Where a requested review decision stands.
    pub enum DecisionStatus("review decision status", 4) {
        Pending = "pending",
        Approved = "approved",
        Rejected = "rejected",
        /// The withdrawal left review another way first; nothing was applied.
        Superseded = "superseded",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_values_round_trip_through_their_names() {
        crate::assert_text_enum_round_trips!(ReviewAction);
        crate::assert_text_enum_round_trips!(DecisionStatus);
    }
}
