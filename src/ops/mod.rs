//! The operator core (SPEC §8): every operator action — review, two-person decisions, dead-letter
//! triage, replays, audit, overview, credentials, credits, customer notifications — as typed
//! service functions shared by the ops API (`http::ops`, thin handlers), the console (which calls
//! them directly, as the signed-in operator) and the CLI (which reads the same [`types`] over
//! HTTP).
//!
//! Free of HTTP. Each function takes the [`Ops`] context and the [`Operator`], checks the role
//! through its [`Act`] (before anything else; a refusal is audited), applies the rules and writes
//! one append-only audit row for every action that changes anything or is refused. Answers are
//! the DTOs of [`types`]; failures are [`OpsError`]. Owns no SQL: storage does.

pub mod approvals;
pub mod audit;
mod auth;
pub mod credentials;
pub mod credits;
pub mod dead_letters;
pub mod decide;
pub mod decisions;
pub mod error;
pub mod ledger;
pub mod notifications;
pub mod overview;
pub mod replays;
pub mod review;
pub mod routes;
pub mod settlement;
pub mod trends;
pub mod types;
pub mod webhooks;

pub use crate::config::ReplaySettings;

use serde_json::Value;
use uuid::Uuid;

pub use auth::{authenticate, check_token, CredentialRefusal, Operator, Role};
pub use error::{OpsError, OpsResult, Refusal, RefusalKind};

use crate::config::AppConfig;
use crate::domain::input_text;
use crate::provider::{Gateway, Gateways};
use crate::storage::audit::{self as audit_store, AuditRow};
use crate::storage::{Db, DbTime, Tx};

/// What every operator action runs against: the database, the settings and — when this process
/// has one — the provider (review decisions are checked against it live).
#[derive(Clone, Copy)]
pub struct Ops<'a> {
    pub db: &'a Db,
    pub config: &'a AppConfig,
    /// Every provider this process can reach (none in a process without one).
    pub gateways: Option<&'a Gateways>,
}

/// One kind of operator action: the role it needs and how its audit rows name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Act {
    /// The audit `action`, e.g. `replay.start`.
    pub name: &'static str,
    pub target_type: &'static str,
    pub role: Role,
    /// The audit `target_id` when the route names none (e.g. `new`, `all`).
    pub default_target: &'static str,
}

/// An action as a type, so a route can name it in its extractor (`Authorized<ReplayStart>`).
pub trait Action {
    const ACT: Act;
}

macro_rules! actions {
    ($($(#[$doc:meta])* $ty:ident => $name:literal, $target:literal, $role:ident, $default:literal;)*) => {
        /// Every operator action that changes something (or may be refused for its role), as a
        /// type: its role and audit names in one place.
        pub mod acts {
            use super::{Act, Action, Role};
            $(
                $(#[$doc])*
                pub struct $ty;
                impl Action for $ty {
                    const ACT: Act = Act { name: $name, target_type: $target, role: Role::$role, default_target: $default };
                }
            )*
        }
    };
}

actions! {
    WithdrawalResolve => "withdrawal.resolve", "withdrawal", Operator, "";
    /// Reconcile a withdrawal still in `processing` now, not at the stuck sweep's SLA.
    WithdrawalReconcile => "withdrawal.reconcile", "withdrawal", Operator, "";
    DecisionApprove => "withdrawal.decision.approve", "withdrawal", Operator, "";
    DecisionReject => "withdrawal.decision.reject", "withdrawal", Operator, "";
    DeadLetterClose => "dead_letter.close", "dead_letter", Operator, "";
    ReplayStart => "replay.start", "replay", Operator, "new";
    ReplayPause => "replay.pause", "replay", Operator, "";
    ReplayResume => "replay.resume", "replay", Operator, "";
    ReplayCancel => "replay.cancel", "replay", Operator, "";
    /// A second person, and an admin: large runs (SPEC §8.3).
    ReplayApprove => "replay.approve", "replay", Admin, "";
    /// Money entering an account (issue 27): treasury or admin.
    AccountCredit => "account.credit", "account", Treasury, "";
    ApiKeyList => "api_key.list", "account", Admin, "";
    ApiKeyCreate => "api_key.create", "account", Admin, "";
    ApiKeyRevoke => "api_key.revoke", "api_key", Admin, "";
    OperatorList => "operator.list", "operator", Admin, "all";
    OperatorDisable => "operator.disable", "operator", Admin, "";
    OperatorEnable => "operator.enable", "operator", Admin, "";
    /// Another operator's token (marks the new one as issued by the caller: see
    /// `approvals::second_person`).
    OperatorRotateToken => "operator.rotate_token", "operator", Admin, "";
    /// One's own token: every role, so a person can make their credential their own.
    OperatorRotateOwnToken => "operator.rotate_token", "operator", Viewer, "";
    /// `operators create`, run with only DATABASE_URL, as the local actor.
    OperatorCreate => "operator.create", "operator", Admin, "new";
    SettlementImport => "settlement.import", "settlement_report", Operator, "new";
    SettlementExceptionResolve => "settlement_exception.resolve", "settlement_exception", Operator, "";
    /// Credit the return a `returned` exception holds, once the provider's record shows it.
    SettlementReturnCredit => "settlement_exception.credit_return", "settlement_exception", Operator, "";
    /// Send a customer notification again (SPEC §17): its endpoint must be enabled.
    NotificationRedeliver => "notification.redeliver", "notification", Operator, "";
    /// The kill switch (SPEC §8): admin only.
    BreakerForceOpen => "breaker.force_open", "breaker", Admin, "";
    BreakerForceClosed => "breaker.force_closed", "breaker", Admin, "";
    BreakerRelease => "breaker.release", "breaker", Admin, "";
}

/// Operators' names by id, for the views that say who did what (replays, decisions).
pub type Names = std::collections::HashMap<uuid::Uuid, String>;

/// The names of the operators `ids` name (unknown ids are left out; a view shows its id then).
pub async fn names(db: &Db, mut ids: Vec<uuid::Uuid>) -> OpsResult<Names> {
    ids.sort();
    ids.dedup();
    Ok(crate::storage::credentials::operator_names(db, &ids).await?)
}

/// `id`'s name, or the id itself when the operator is unknown.
pub fn name_of(names: &Names, id: uuid::Uuid) -> String {
    names.get(&id).cloned().unwrap_or_else(|| id.to_string())
}

impl<'a> Ops<'a> {
    pub fn new(db: &'a Db, config: &'a AppConfig, gateways: Option<&'a Gateways>) -> Self {
        Ops { db, config, gateways }
    }

    /// The provider whose record decides about `w` (SPEC §16): the one its latest attempt went
    /// to, or the first for its currency. 503 when this process reaches none, or that provider is
    /// no longer configured (no other may answer in its place).
    pub async fn provider_for(&self, w: &crate::domain::Withdrawal) -> OpsResult<&'a Gateway> {
        let unreachable = || OpsError::unavailable("provider_unavailable", "this process cannot reach the provider");
        let gateways = self.gateways.ok_or_else(unreachable)?;
        crate::jobs::routing::asked_of(gateways, self.db, w).await?.ok_or_else(unreachable)
    }

    /// SPEC §8: the role comes first. A caller whose role is below `act`'s is refused (403) and
    /// audited — the action and its target, no reason: nothing else of the request is read.
    pub async fn authorize(&self, operator: &Operator, act: &Act, target: &str) -> OpsResult<()> {
        match operator.require(act.role) {
            Ok(()) => Ok(()),
            Err(forbidden) => {
                let target = if target.is_empty() { act.default_target } else { target };
                let audited = Audited::new(act, target, "", serde_json::json!({"body": "not read"}));
                Err(audited.refuse(self, operator, forbidden).await)
            }
        }
    }
}

impl Ops<'_> {
    /// The one way an action that changes something runs: the role first ([`Ops::authorize`],
    /// a refusal audited), then `body` with the action's audit row — which `body` writes in the
    /// transaction that does the work ([`Audited::record_ok`]), and may add to as it learns
    /// what it acts on — and any failure of `body` audited as the action's refusal, with what the
    /// row held then. `target` empty names the action's default target.
    pub async fn perform<T>(
        &self,
        operator: &Operator,
        act: &Act,
        target: impl Into<String>,
        reason: &str,
        parameters: Value,
        body: impl AsyncFnOnce(&mut Audited<'_>) -> OpsResult<T>,
    ) -> OpsResult<T> {
        let target = target.into();
        self.authorize(operator, act, &target).await?;
        let target = if target.is_empty() { act.default_target.to_owned() } else { target };
        let mut audited = Audited::new(act, target, reason, parameters);
        let result = body(&mut audited).await;
        audited.or_refuse(self, operator, result).await
    }
}

/// What an action did, for its audit row.
pub struct Audited<'a> {
    pub action: &'a str,
    pub target_type: &'a str,
    pub target_id: String,
    pub reason: &'a str,
    /// The request's parameters as serialised values (never `Debug` output).
    pub parameters: Value,
}

impl<'a> Audited<'a> {
    pub fn new(act: &Act, target_id: impl Into<String>, reason: &'a str, parameters: Value) -> Self {
        Audited { action: act.name, target_type: act.target_type, target_id: target_id.into(), reason, parameters }
    }

    /// A copy with the same borrowed fields (to fill in a target found later).
    pub fn clone_shallow(&self) -> Self {
        Audited {
            action: self.action,
            target_type: self.target_type,
            target_id: self.target_id.clone(),
            reason: self.reason,
            parameters: self.parameters.clone(),
        }
    }

    fn row(&self, operator: &Operator, result: &str) -> AuditRow {
        AuditRow {
            id: Uuid::now_v7(),
            operator_id: operator.id.0,
            operator_name: operator.name.clone(),
            role: operator.role,
            action: self.action.to_owned(),
            target_type: self.target_type.to_owned(),
            target_id: self.target_id.clone(),
            reason: crate::redact::text(&stored_text(self.reason.trim())),
            parameters: sqlx::types::Json(crate::redact::json(&stored_parameters(&self.parameters))),
            result: result.to_owned(),
            at: DbTime::now(),
        }
    }

    /// Records a successful action inside the transaction that performs it.
    pub async fn record_ok(&self, tx: &mut Tx, operator: &Operator) -> OpsResult<()> {
        self.record(tx, operator, "ok").await
    }

    /// Records the action with `result` (`ok`, `pending_approval`, …) inside `tx`.
    pub async fn record(&self, tx: &mut Tx, operator: &Operator, result: &str) -> OpsResult<()> {
        audit_store::insert(tx, &self.row(operator, result)).await?;
        Ok(())
    }

    /// Passes a success through (it wrote its own audit row in its transaction); audits a
    /// refusal and hands it back.
    pub async fn or_refuse<T>(&self, ops: &Ops<'_>, operator: &Operator, result: OpsResult<T>) -> OpsResult<T> {
        match result {
            Ok(value) => Ok(value),
            Err(err) => Err(self.refuse(ops, operator, err).await),
        }
    }

    /// Records a refusal (in its own transaction) and hands the error back.
    pub async fn refuse(&self, ops: &Ops<'_>, operator: &Operator, error: OpsError) -> OpsError {
        let written = async {
            let mut tx = ops.db.begin().await?;
            audit_store::insert(&mut tx, &self.row(operator, error.code())).await?;
            tx.commit().await
        };
        if let Err(err) = written.await {
            tracing::error!(error = format!("{:#}", anyhow::Error::from(err)), "could not audit a refused action");
        }
        error
    }
}

/// A reason as an audit row may store it: text the text rule refuses (a NUL, which PostgreSQL
/// cannot store, or another control character) is never written, so the row of its refusal is.
fn stored_text(reason: &str) -> std::borrow::Cow<'_, str> {
    match input_text::refused_char(reason) {
        Some(_) => "(refused: control characters)".into(),
        None => reason.into(),
    }
}

/// Parameters as an audit row may store them: when a string breaks the text rule, only where.
fn stored_parameters(parameters: &Value) -> std::borrow::Cow<'_, Value> {
    match input_text::check_json(parameters) {
        Ok(()) => std::borrow::Cow::Borrowed(parameters),
        Err(invalid) => std::borrow::Cow::Owned(serde_json::json!({"refused_text": invalid.field})),
    }
}

/// An action's parameters for its audit row: the request serialised, without its reason (the
/// row has its own column for that).
pub fn parameters_of<T: serde::Serialize>(request: &T) -> Value {
    let mut value = serde_json::to_value(request).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.remove("reason");
    }
    value
}

/// A reason is required for every action and kept short enough to read in a list.
pub fn require_reason(reason: &str) -> OpsResult<&str> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > 500 {
        return Err(OpsError::invalid("reason_required", "reason", "a reason of 1 to 500 characters is required"));
    }
    Ok(reason)
}

/// A page size: 50 unless asked, 1 to 500.
pub fn page_limit(limit: Option<i64>) -> OpsResult<i64> {
    let limit = limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(OpsError::invalid("invalid_limit", "limit", "limit must be 1 to 500"));
    }
    Ok(limit)
}

/// A list cursor: where the last page ended (time and id), opaque to clients.
pub fn encode_cursor(at: DbTime, id: Uuid) -> String {
    hex::encode(format!("{}|{id}", at.0.timestamp_micros()))
}

pub fn decode_cursor(raw: &str) -> OpsResult<(DbTime, Uuid)> {
    let bad = || OpsError::invalid("invalid_cursor", "cursor", "unknown cursor");
    let text = String::from_utf8(hex::decode(raw).map_err(|_| bad())?).map_err(|_| bad())?;
    let (micros, id) = text.split_once('|').ok_or_else(bad)?;
    let at = DbTime::from_client_micros(micros.parse().map_err(|_| bad())?).ok_or_else(bad)?;
    Ok((at, Uuid::parse_str(id).map_err(|_| bad())?))
}

/// A page of `limit` from `rows` fetched with `limit + 1`: the extra row says there is a next
/// page, and `cursor` names where it starts.
pub fn page<R, T>(
    mut rows: Vec<R>,
    limit: i64,
    cursor: impl Fn(&R) -> String,
    view: impl Fn(&R) -> T,
) -> types::Page<T> {
    let next_cursor = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(&cursor)
    } else {
        None
    };
    types::Page { data: rows.iter().map(view).collect(), next_cursor }
}

/// An id an operator typed (a path segment, a form field): one that is not a UUID names nothing.
pub fn parse_id(raw: &str) -> OpsResult<Uuid> {
    Uuid::parse_str(raw.trim()).map_err(|_| OpsError::not_found())
}
