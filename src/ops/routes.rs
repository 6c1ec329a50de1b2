//! Every `/ops/v1` route's path, written once: the router declares its template
//! ([`Route::template`], `{id}` segments as axum reads them) and the clients — the CLI and
//! chaos — fill it ([`Route::path`]), so a renamed route cannot leave a client behind.

use std::fmt::Display;

/// One route of the ops API, by its path template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route(&'static str);

impl Route {
    /// The template the router declares, e.g. `/ops/v1/withdrawals/{id}`.
    pub const fn template(self) -> &'static str {
        self.0
    }

    /// The path with `args` in its `{…}` segments, in order, each percent-encoded as one path
    /// segment (a breaker name may hold any character). Panics if the count differs: that is a
    /// bug at the call site, found by its first test.
    pub fn path(self, args: &[&dyn Display]) -> String {
        let mut args = args.iter();
        let segments: Vec<String> = self
            .0
            .split('/')
            .map(|segment| match segment.starts_with('{') && segment.ends_with('}') {
                true => segment_encoded(&args.next().expect("an argument for every {segment}").to_string()),
                false => segment.to_owned(),
            })
            .collect();
        assert!(args.next().is_none(), "more arguments than segments in {}", self.0);
        segments.join("/")
    }
}

/// `text` as one path segment: unreserved characters as they are, every other byte `%XX`.
fn segment_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub const OVERVIEW: Route = Route("/ops/v1/overview");
pub const AUDIT: Route = Route("/ops/v1/audit");
pub const LEDGER_VERIFY: Route = Route("/ops/v1/ledger/verify");

pub const WITHDRAWALS: Route = Route("/ops/v1/withdrawals");
pub const WITHDRAWAL: Route = Route("/ops/v1/withdrawals/{id}");
pub const WITHDRAWAL_RESOLVE: Route = Route("/ops/v1/withdrawals/{id}/resolve");
pub const WITHDRAWAL_RECONCILE: Route = Route("/ops/v1/withdrawals/{id}/reconcile");
pub const REVIEW_DECISIONS: Route = Route("/ops/v1/review-decisions");
pub const DECISION_APPROVE: Route = Route("/ops/v1/withdrawals/{id}/decision/approve");
pub const DECISION_REJECT: Route = Route("/ops/v1/withdrawals/{id}/decision/reject");

pub const DEAD_LETTERS: Route = Route("/ops/v1/dead-letters");
pub const DEAD_LETTERS_SUMMARY: Route = Route("/ops/v1/dead-letters/summary");
pub const DEAD_LETTERS_EXPORT: Route = Route("/ops/v1/dead-letters/export");
pub const DEAD_LETTER: Route = Route("/ops/v1/dead-letters/{id}");
pub const DEAD_LETTER_CLOSE: Route = Route("/ops/v1/dead-letters/{id}/close");

pub const REPLAYS: Route = Route("/ops/v1/replays");
pub const REPLAY: Route = Route("/ops/v1/replays/{id}");
pub const REPLAY_PAUSE: Route = Route("/ops/v1/replays/{id}/pause");
pub const REPLAY_RESUME: Route = Route("/ops/v1/replays/{id}/resume");
pub const REPLAY_CANCEL: Route = Route("/ops/v1/replays/{id}/cancel");
pub const REPLAY_APPROVE: Route = Route("/ops/v1/replays/{id}/approve");

pub const BREAKERS: Route = Route("/ops/v1/breakers");
pub const BREAKER_FORCE_OPEN: Route = Route("/ops/v1/breakers/{id}/force-open");
pub const BREAKER_FORCE_CLOSED: Route = Route("/ops/v1/breakers/{id}/force-closed");
pub const BREAKER_RELEASE: Route = Route("/ops/v1/breakers/{id}/release");

pub const ACCOUNT_KEYS: Route = Route("/ops/v1/accounts/{id}/keys");
pub const ACCOUNT_CREDITS: Route = Route("/ops/v1/accounts/{id}/credits");
pub const API_KEY_REVOKE: Route = Route("/ops/v1/api-keys/{id}/revoke");
pub const OPERATORS: Route = Route("/ops/v1/operators");
pub const OPERATOR_DISABLE: Route = Route("/ops/v1/operators/{id}/disable");
pub const OPERATOR_ENABLE: Route = Route("/ops/v1/operators/{id}/enable");
pub const OPERATOR_ROTATE_TOKEN: Route = Route("/ops/v1/operators/{id}/rotate-token");

pub const SETTLEMENT_IMPORTS: Route = Route("/ops/v1/settlement/imports");
pub const SETTLEMENT_IMPORT: Route = Route("/ops/v1/settlement/imports/{id}");
pub const SETTLEMENT_REPORTS: Route = Route("/ops/v1/settlement/reports");
pub const SETTLEMENT_EXCEPTIONS: Route = Route("/ops/v1/settlement/exceptions");
pub const WEBHOOK_EVENTS: Route = Route("/ops/v1/webhook-events");
pub const WEBHOOK_EVENT: Route = Route("/ops/v1/webhook-events/{id}");
pub const WEBHOOK_ENDPOINTS: Route = Route("/ops/v1/webhook-endpoints");
pub const NOTIFICATIONS: Route = Route("/ops/v1/notifications");
pub const NOTIFICATION: Route = Route("/ops/v1/notifications/{id}");
pub const NOTIFICATION_REDELIVER: Route = Route("/ops/v1/notifications/{id}/redeliver");
pub const SETTLEMENT_EXCEPTION: Route = Route("/ops/v1/settlement/exceptions/{id}");
pub const SETTLEMENT_EXCEPTION_RESOLVE: Route = Route("/ops/v1/settlement/exceptions/{id}/resolve");
pub const SETTLEMENT_EXCEPTION_CREDIT_RETURN: Route = Route("/ops/v1/settlement/exceptions/{id}/credit-return");

/// The route of one replay-run control.
pub fn replay_control(action: super::types::ReplayControl) -> Route {
    use super::types::ReplayControl;
    match action {
        ReplayControl::Pause => REPLAY_PAUSE,
        ReplayControl::Resume => REPLAY_RESUME,
        ReplayControl::Cancel => REPLAY_CANCEL,
        ReplayControl::Approve => REPLAY_APPROVE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_fills_each_segment_in_order_encoded() {
        assert_eq!(OVERVIEW.path(&[]), "/ops/v1/overview");
        let id = uuid::Uuid::nil();
        assert_eq!(WITHDRAWAL_RESOLVE.path(&[&id]), format!("/ops/v1/withdrawals/{id}/resolve"));
        assert_eq!(BREAKER_RELEASE.path(&[&"provider a/b"]), "/ops/v1/breakers/provider%20a%2Fb/release");
    }

    #[test]
    #[should_panic(expected = "an argument for every {segment}")]
    fn a_path_without_its_argument_is_a_bug() {
        WITHDRAWAL.path(&[]);
    }
}
