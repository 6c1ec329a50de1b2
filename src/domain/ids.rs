//! Typed identifiers. All are UUIDs (v7 when generated here, so they sort by creation time and
//! keep B-tree inserts local); the newtypes stop a job id from being passed where a withdrawal
//! id is expected. Each is `sqlx::Type` (transparent), so it binds and decodes as the UUID it
//! wraps on both backends and rows come back typed.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! id_type {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type)]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A new, time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

id_type!(
    /// A customer account (the owner of balances and API keys).
    AccountId
);
id_type!(
    /// A provider event as we stored it (SPEC §15); the provider's own id is its `event_id`.
    WebhookEventId
);
id_type!(
    /// A customer event in the outbox (SPEC §17); customers see it as `evt_…`.
    EventId
);
id_type!(
    /// An integrator's notification endpoint (SPEC §17); customers see it as `we_…`.
    WebhookEndpointId
);
id_type!(
    /// One event's delivery to one endpoint (SPEC §17).
    NotificationId
);
id_type!(
    /// A withdrawal; also the provider's idempotency key for its payout (SPEC §4).
    WithdrawalId
);
id_type!(
    /// A durable job in the jobs table (SPEC §5).
    JobId
);
id_type!(
    /// A finance operator or on-call engineer (SPEC §8).
    OperatorId
);
id_type!(
    /// A dead-letter envelope (SPEC §6).
    DeadLetterId
);
id_type!(
    /// A handling event beside a dead letter (closed, replayed, …).
    DeadLetterEventId
);
id_type!(
    /// A replay run (SPEC §8.3).
    ReplayRunId
);
id_type!(
    /// One dead letter's place in a replay run.
    ReplayItemId
);
id_type!(
    /// One provider attempt of a withdrawal (SPEC §4).
    AttemptId
);
id_type!(
    /// One imported version of a provider's settlement report (SPEC §14.1).
    SettlementReportId
);
id_type!(
    /// One line of an imported settlement report.
    SettlementLineId
);
id_type!(
    /// A settlement exception for operators (SPEC §14.2).
    SettlementExceptionId
);
id_type!(
    /// A run's lease on a job: every write after the claim is fenced by it (random, not
    /// time-ordered: [`LeaseToken::random`]).
    LeaseToken
);
id_type!(
    /// A customer API key (its public half).
    ApiKeyId
);
id_type!(
    /// An operator console session.
    SessionId
);
id_type!(
    /// A four-eyes review decision waiting for, or given by, a second operator.
    DecisionId
);
id_type!(
    /// A recorded withdrawal transition.
    TransitionId
);
id_type!(
    /// A reconciliation result (SPEC §7).
    ReconciliationId
);

impl AccountId {
    /// The system account (the nil UUID): the owner of work about no customer's withdrawal, such
    /// as the daily settlement import's jobs and their dead letters, so every job and letter has
    /// an account to be keyed by. It holds no balances, keys or withdrawals.
    pub const SYSTEM: AccountId = AccountId(Uuid::nil());
}

impl LeaseToken {
    /// A fresh, unguessable token.
    pub fn random() -> Self {
        Self(Uuid::new_v4())
    }
}
