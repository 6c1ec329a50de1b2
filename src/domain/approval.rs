//! Maker-checker (SPEC §8): what a second person approves, and who counts as one. Every action that
//! needs two people is an [`ApprovalKind`]; the rule of who may approve, [`may_approve`], is one
//! pure function over who asked, who approves and who issued the approver's current credential.
//! The flow (check, mark decided, apply, audit) is `ops::approvals`, run inside `Ops::perform`,
//! which authorises.

use super::OperatorId;
use crate::text_enum;

text_enum! {
    /// An action that waits for a second person before it takes effect.
    pub enum ApprovalKind("approval kind", 2) {
        /// A review decision (`complete` or `fail`) at or above `REVIEW_APPROVAL_THRESHOLD`.
        ReviewDecision = "review_decision",
        /// A replay run over `REPLAY_APPROVAL_THRESHOLD` items.
        ReplayRun = "replay_run",
    }
}

/// Why an approver does not count as a second person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotSecondPerson {
    /// The approver is the requester.
    SamePerson,
    /// The approver's current credential was issued by the requester, who could hold it too.
    IssuedByRequester,
    /// The approver's current credential was issued with database access only, which anyone with
    /// the database URL could do.
    IssuedLocally,
    /// The approver's current credential predates recorded issuers.
    IssuerUnknown,
}

impl NotSecondPerson {
    /// The refusal's stable code: `second_operator_required` for the same person,
    /// `approval_needs_another_person` for a credential that cannot stand for another.
    pub fn code(self) -> &'static str {
        match self {
            NotSecondPerson::SamePerson => "second_operator_required",
            NotSecondPerson::IssuedByRequester | NotSecondPerson::IssuedLocally | NotSecondPerson::IssuerUnknown => {
                "approval_needs_another_person"
            }
        }
    }
}

/// Whether `approver` may approve what `requester` asked: another person, whose current credential
/// (issued by `issued_by`; `None` before issuers were recorded) was issued neither by the
/// requester nor with database access only (`local_actor`).
pub fn may_approve(
    requester: OperatorId,
    approver: OperatorId,
    issued_by: Option<OperatorId>,
    local_actor: OperatorId,
) -> Result<(), NotSecondPerson> {
    if approver == requester {
        return Err(NotSecondPerson::SamePerson);
    }
    match issued_by {
        None => Err(NotSecondPerson::IssuerUnknown),
        Some(issuer) if issuer == requester => Err(NotSecondPerson::IssuedByRequester),
        Some(issuer) if issuer == local_actor => Err(NotSecondPerson::IssuedLocally),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_another_person_with_a_credential_of_their_own_may_approve() {
        let (requester, approver, admin, local) =
            (OperatorId::new(), OperatorId::new(), OperatorId::new(), OperatorId(uuid::Uuid::nil()));
        let table = [
            (requester, Some(admin), Err(NotSecondPerson::SamePerson)),
            (approver, Some(requester), Err(NotSecondPerson::IssuedByRequester)),
            (approver, Some(local), Err(NotSecondPerson::IssuedLocally)),
            (approver, None, Err(NotSecondPerson::IssuerUnknown)),
            (approver, Some(admin), Ok(())),
            // Issued by oneself (a rotation of one's own token) counts.
            (approver, Some(approver), Ok(())),
        ];
        for (who, issued_by, expected) in table {
            assert_eq!(may_approve(requester, who, issued_by, local), expected, "{who:?} issued by {issued_by:?}");
        }
    }

    #[test]
    fn approval_kinds_round_trip_through_their_names() {
        crate::assert_text_enum_round_trips!(ApprovalKind);
    }
}
