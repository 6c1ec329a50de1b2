//! The ledger's entry kinds (SPEC §1.2): why a balance moved, and by how much in each bucket.
//! Every entry moves money between `available`, `held` and `paid_out`, or (funding) brings it in,
//! so `available + held + paid_out` equals the funding of an account at all times.

use crate::text_enum;

text_enum! {
    /// Why a balance moved: the `kind` of a ledger entry.
    pub enum EntryKind("ledger entry kind", 5) {
        /// Money arriving from outside (the account's funding; the invariant's right-hand side).
        Funding = "funding",
        /// available → held, when a withdrawal is created.
        Hold = "hold",
        /// held → paid out, when the provider confirms.
        Settle = "settle",
        /// held → available, when a withdrawal definitively fails.
        Release = "release",
        /// paid out → available, when the bank returns a paid payout (SPEC §14.3).
        Return = "return",
    }
}

impl EntryKind {
    /// (available, held, paid_out) deltas for `amount` minor units.
    pub fn deltas(self, amount: i64) -> (i64, i64, i64) {
        match self {
            EntryKind::Funding => (amount, 0, 0),
            EntryKind::Hold => (-amount, amount, 0),
            EntryKind::Settle => (0, -amount, amount),
            EntryKind::Release => (amount, -amount, 0),
            EntryKind::Return => (amount, 0, -amount),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_funding_changes_the_sum_of_the_buckets() {
        crate::assert_text_enum_round_trips!(EntryKind);
        for kind in EntryKind::ALL {
            let (a, h, p) = kind.deltas(250);
            let expected = if kind == EntryKind::Funding { 250 } else { 0 };
            assert_eq!(a + h + p, expected, "{kind}");
        }
    }
}
