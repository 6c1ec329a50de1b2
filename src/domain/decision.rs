//! A review decision's life (SPEC §8, the two-person rule): requested and pending until a second
//! operator approves or rejects it, or superseded when the withdrawal left review another way.

use crate::text_enum;

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
