//! The withdrawal domain: values, states and the rules between them.
//!
//! Everything here is pure — no I/O, no clock, no randomness — so every rule can be tested
//! exhaustively and reused by the HTTP layer, the storage layer and the workers. (Ids are
//! generated here, from the clock and randomness, but nothing else is.) This is the bottom of
//! the module graph: it imports nothing from the crate.
//!
//! The states stored as TEXT ([`ReplayStatus`], [`JobStatus`], [`SideEffect`], …) derive
//! `sqlx::Type` through [`text_enum!`](crate::text_enum), so rows come back typed.

mod approval;
mod cluster;
mod decision;
mod destination;
mod evidence;
pub mod failover;
mod failure;
mod idempotency;
mod ids;
pub mod input_text;
pub mod job;
mod ledger;
mod money;
pub mod notification;
mod reference;
mod replay;
mod role;
pub mod settlement;
mod status;
mod text_enum;
pub mod view;
pub mod webhook;
mod withdrawal;

pub use approval::{may_approve, ApprovalKind, NotSecondPerson};
pub use cluster::{BreakerOverride, BreakerState, ProcessRole};
pub use decision::{DecisionStatus, ReviewAction};
pub use destination::mask_account_number;
pub use destination::{Destination, DestinationError};
pub use evidence::{
    Approval, AttemptResult, BothRecords, Evidence, EvidenceSource, HeldRecord, LineEvidence, MissingEvidence,
    OurRecord, ReconciliationResult, ReportLineRecord, SideEffect, StoredEvidence, TransferRecord, TransferStatus,
    UnreadableEvidence, VerdictKind,
};
pub use failure::{Category, LetterEvent, LetterState};
pub use idempotency::{IdempotencyKey, IdempotencyKeyError, IdempotencyState};
pub use ids::{
    AccountId, ApiKeyId, AttemptId, DeadLetterEventId, DeadLetterId, DecisionId, EventId, JobId, LeaseToken,
    NotificationId, OperatorId, ReconciliationId, ReplayItemId, ReplayRunId, SessionId, SettlementExceptionId,
    SettlementLineId, SettlementReportId, TransitionId, WebhookEndpointId, WebhookEventId, WithdrawalId,
};
pub use job::{JobKey, JobStatus};
pub use ledger::EntryKind;
pub use money::format_minor;
pub use money::{Amount, AmountError, AmountLimits, Currency};
pub use notification::{DeliveryResult, EndpointStatus, EventType, EventTypes, NotificationStatus};
pub use reference::{check_reference, ReferenceError, MAX_REFERENCE_CHARS};
pub use replay::{check_replay_transition, ReplayAction, ReplayItemStatus, ReplayStatus, ReplayTransitionError};
pub use role::Role;
pub use status::{check_transition, path_to_review, Actor, LedgerEffect, TransitionError, WithdrawalStatus};
pub use text_enum::UnknownValue;
pub use webhook::WebhookResult;
pub use withdrawal::{Withdrawal, WithdrawalKey};
