//! Credentials (admin): API keys, operators, credits.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::Role;

crate::text_enum! {
    /// Whether an API key authenticates.
    pub enum KeyStatus("API key status", 2) {
        Active = "active",
        Revoked = "revoked",
    }
}

crate::text_enum! {
    /// Whether an operator may sign in.
    pub enum OperatorStatus("operator status", 2) {
        Enabled = "enabled",
        Disabled = "disabled",
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiKeyView {
    pub id: Uuid,
    pub account_id: Uuid,
    pub label: Option<String>,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub status: KeyStatus,
    pub revoked_at: Option<DateTime<Utc>>,
    pub revoked_reason: Option<String>,
    /// The new key, in the answer that created it and nowhere else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperatorView {
    pub id: Uuid,
    pub name: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
    pub status: OperatorStatus,
    pub disabled_at: Option<DateTime<Utc>>,
    pub disabled_reason: Option<String>,
    pub token_rotated_at: Option<DateTime<Utc>>,
    /// Who issued the current token (created, rotated, re-enabled): an operator's id, or the nil
    /// id for a local actor (`DATABASE_URL` only); `None` if issued before this was recorded.
    #[serde(default)]
    pub credential_issued_by: Option<Uuid>,
    /// The issuer's name then (`local:<os user>` for a local actor).
    #[serde(default)]
    pub credential_issuer_name: Option<String>,
    /// Console sessions a disable or rotation ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions_ended: Option<u64>,
    /// The new token, in the rotation's answer and nowhere else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The rotation replaced the caller's own token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_token: Option<bool>,
}

/// `POST /ops/v1/accounts/{id}/keys`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// `{reason?}`: a rotation's body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptionalReason {
    #[serde(default)]
    pub reason: Option<String>,
}

/// `POST /ops/v1/accounts/{id}/credits` (with an `Idempotency-Key`): money entering an account.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreditRequest {
    /// A decimal string in the customer API's grammar (`"1000.00"`), within the credit limit.
    pub amount: String,
    pub currency: String,
    pub reason: String,
}

/// A credit done: the answer of the request that made it, and of every replay of its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditView {
    pub id: Uuid,
    pub account_id: Uuid,
    pub amount: String,
    pub currency: String,
    pub reason: String,
    /// `operator:<id>` or `local:<os user>`: on the ledger entry too.
    pub actor: String,
    pub ledger_entry_id: Uuid,
    pub idempotency_key: String,
    pub created_at: DateTime<Utc>,
}

/// `GET /ops/v1/ledger/verify[?date=D]` when the ledger holds (a difference is a 409
/// `ledger_violation`, or `settlement_totals_differ` for a day's totals).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LedgerCheck {
    pub clean: bool,
    /// With `date`: the day checked, and its totals per currency (ours against the report's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<chrono::NaiveDate>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub totals: Vec<DayTotalView>,
}

/// `GET /ops/v1/ledger/verify?date=`: the day to check against its settlement report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LedgerQuery {
    /// `YYYY-MM-DD` (UTC).
    pub date: Option<String>,
}

/// One currency's totals of a day, in the currency's units: ours against the report's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayTotalView {
    pub currency: String,
    pub ours_paid: String,
    pub report_paid: String,
    pub ours_returned: String,
    pub report_returned: String,
}
