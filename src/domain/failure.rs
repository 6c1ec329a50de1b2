//! Dead-letter categories (SPEC §6's table): why automation gave up, by who must act next, and
//! where the runbook is. Stored as TEXT on dead letters; `dead_letter` builds envelopes with them.

use crate::text_enum;

text_enum! {
    /// Why automation gave up, by who must act next (SPEC §6's table).
    pub enum Category("dead-letter category", 9) {
        BadPayload = "bad_payload",
        DependencyRejected = "dependency_rejected",
        SideEffectUnknown = "side_effect_unknown",
        CodeBug = "code_bug",
        RetriesExhausted = "retries_exhausted",
        Crashed = "crashed",
        /// The provider's record differs from ours (amount, currency, reference): never completed
        /// automatically.
        ProviderMismatch = "provider_mismatch",
        /// Our own database failed the job run after run (unreachable, out of connections,
        /// locked): retried with backoff first (SPEC §5), never filed as a bug.
        Infrastructure = "infrastructure",
        /// A customer notification (SPEC §17) that no retry delivered within its window: the
        /// integrator's endpoint must be mended, then the dead letter replayed.
        NotificationUndeliverable = "notification_undeliverable",
    }
}

text_enum! {
    /// Whether a dead letter still waits for someone (`open`) or was archived (`closed`).
    pub enum LetterState("dead-letter state", 2) {
        Open = "open",
        Closed = "closed",
    }
}

text_enum! {
    /// What happened to a dead letter after it was written: its envelope never changes, its
    /// handling is a list of these events.
    pub enum LetterEvent("dead-letter event", 2) {
        /// Archived by an operator, or because its withdrawal settled.
        Closed = "closed",
        /// Released again by a replay run (its details name the job).
        Replayed = "replayed",
    }
}

impl Category {
    pub fn owner(self) -> &'static str {
        match self {
            Category::BadPayload => "producing team",
            Category::DependencyRejected | Category::RetriesExhausted => "integration owner",
            Category::SideEffectUnknown => "operator",
            Category::CodeBug | Category::Crashed | Category::Infrastructure => "service team",
            Category::ProviderMismatch => "finance operations",
            Category::NotificationUndeliverable => "integration team",
        }
    }

    /// The runbook page with the next action.
    pub fn runbook(self) -> &'static str {
        match self {
            Category::BadPayload => "runbooks/dead-letter-bad-payload.md",
            Category::DependencyRejected => "runbooks/dead-letter-dependency-rejected.md",
            Category::SideEffectUnknown => "runbooks/dead-letter-side-effect-unknown.md",
            Category::CodeBug => "runbooks/dead-letter-code-bug.md",
            Category::RetriesExhausted => "runbooks/dead-letter-retries-exhausted.md",
            Category::Crashed => "runbooks/dead-letter-crashed.md",
            Category::ProviderMismatch => "runbooks/dead-letter-provider-mismatch.md",
            Category::Infrastructure => "runbooks/dead-letter-infrastructure.md",
            Category::NotificationUndeliverable => "runbooks/dead-letter-notification-undeliverable.md",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_round_trip_through_their_names() {
        crate::assert_text_enum_round_trips!(Category);
    }
}
