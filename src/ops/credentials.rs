//! Credential lifecycle (issue 17): customer API keys (several per account, for rotation) and
//! operator tokens, managed by admins. Every action is admin only; the role is checked before the
//! path and the body, and every action — done or refused — writes one audit row. A new secret is
//! in the response that creates it and nowhere else (stored hashed, never listed, never audited).
//!
//! | route | role |
//! |---|---|
//! | `GET /ops/v1/accounts/{id}/keys` | admin |
//! | `POST /ops/v1/accounts/{id}/keys` `{label?, reason?}` → 201, the key once | admin |
//! | `POST /ops/v1/api-keys/{id}/revoke` `{reason}` | admin |
//! | `GET /ops/v1/operators` | admin |
//! | `POST /ops/v1/operators/{id}/disable` `{reason}` (not the last enabled admin) | admin |
//! | `POST /ops/v1/operators/{id}/enable` `{reason}` | admin |
//! | `POST /ops/v1/operators/{id}/rotate-token` `{reason?}` → the new token once | admin; any role for one's own |
//!
//! Authentication reads the database on every request (there is no credential cache), so a
//! revoke, a disable or a rotation takes effect on the next request, on every instance. A disable
//! or a rotation also ends the operator's console sessions.
//!
//! Each operator credential records who issued it (create, rotate, re-enable): the caller, or the
//! local actor for `operators create` run with only `DATABASE_URL`; the two-person rule
//! ([`super::approvals::second_person`]) reads it: an approver's current credential must have
//! been issued by themselves or by an operator other than the requester — never by the local
//! actor (anyone with database access could have minted it) nor before the issuer was recorded.

use serde_json::json;
use uuid::Uuid;

use super::acts::{
    ApiKeyCreate, ApiKeyList, ApiKeyRevoke, OperatorCreate, OperatorDisable, OperatorEnable, OperatorList,
    OperatorRotateOwnToken, OperatorRotateToken,
};
use super::types::{
    ApiKeyView, CreateKey, KeyStatus, List, OperatorStatus, OperatorView, OptionalReason, ReasonRequest,
};
use super::{require_reason, Action, Audited, Operator, Ops, OpsError, OpsResult};
use crate::credentials::{self, API_KEY_PREFIX, OPERATOR_TOKEN_PREFIX};
use crate::domain::{AccountId, ApiKeyId, OperatorId, Role};
use crate::storage::credentials::{self as stored, ApiKeyRow, Disabled, Issuer, OperatorRow, LOCAL_ACTOR};
use crate::storage::{accounts, sessions};

/// Longest key label.
const MAX_LABEL_CHARS: usize = 100;

pub fn key_view(k: &ApiKeyRow) -> ApiKeyView {
    ApiKeyView {
        id: k.id,
        account_id: k.account_id,
        label: k.label.clone(),
        created_at: k.created_at.0,
        last_used_at: k.last_used_at.map(|t| t.0),
        status: if k.revoked_at.is_some() { KeyStatus::Revoked } else { KeyStatus::Active },
        revoked_at: k.revoked_at.map(|t| t.0),
        revoked_reason: k.revoked_reason.clone(),
        api_key: None,
    }
}

pub fn operator_view(o: &OperatorRow) -> OperatorView {
    OperatorView {
        id: o.id,
        name: o.name.clone(),
        role: o.role,
        created_at: o.created_at.0,
        status: if o.disabled_at.is_some() { OperatorStatus::Disabled } else { OperatorStatus::Enabled },
        disabled_at: o.disabled_at.map(|t| t.0),
        disabled_reason: o.disabled_reason.clone(),
        token_rotated_at: o.token_rotated_at.map(|t| t.0),
        credential_issued_by: o.credential_issued_by,
        credential_issuer_name: o.credential_issuer_name.clone(),
        sessions_ended: None,
        token: None,
        own_token: None,
    }
}

/// An optional reason: absent means `default`; present, it obeys [`require_reason`].
fn optional_reason<'r>(reason: &'r Option<String>, default: &'r str) -> OpsResult<&'r str> {
    match reason {
        None => Ok(default),
        Some(reason) => require_reason(reason),
    }
}

/// The account's keys, oldest first, revoked ones included; ids, labels and times only.
pub async fn list_keys(ops: &Ops<'_>, operator: &Operator, account: AccountId) -> OpsResult<List<ApiKeyView>> {
    ops.authorize(operator, &ApiKeyList::ACT, &account.to_string()).await?;
    let keys = stored::list_api_keys(ops.db, account).await?.ok_or_else(OpsError::not_found)?;
    Ok(List { data: keys.iter().map(key_view).collect() })
}

/// A new key for the account (the old ones keep working until revoked, so clients can move
/// over). The answer is the only place the key ever appears.
pub async fn create_key(
    ops: &Ops<'_>,
    operator: &Operator,
    account: AccountId,
    req: CreateKey,
) -> OpsResult<ApiKeyView> {
    let (reason, parameters) = (req.reason.as_deref().unwrap_or(""), json!({"label": req.label}));
    ops.perform(operator, &ApiKeyCreate::ACT, account.to_string(), reason, parameters, async |audited| {
        let reason = optional_reason(&req.reason, "new API key")?;
        let label = match req.label.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(label) if label.chars().count() > MAX_LABEL_CHARS || label.chars().any(char::is_control) => {
                return Err(OpsError::invalid(
                    "invalid_label",
                    "label",
                    format!("a label is at most {MAX_LABEL_CHARS} printable characters"),
                ))
            }
            Some(label) => Some(label),
        };
        let issued = credentials::issue(API_KEY_PREFIX);
        let mut tx = ops.db.begin().await?;
        if !accounts::account_exists(&mut tx, account).await? {
            return Err(OpsError::not_found());
        }
        stored::insert_api_key(&mut tx, ApiKeyId(issued.id), account, label, &issued.secret_hash).await?;
        let done =
            Audited { reason, parameters: json!({"key_id": issued.id, "label": label}), ..audited.clone_shallow() };
        done.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        let row = stored::get_api_key(ops.db, ApiKeyId(issued.id)).await?.ok_or_else(OpsError::not_found)?;
        Ok(ApiKeyView { api_key: Some(issued.token), ..key_view(&row) })
    })
    .await
}

/// The key fails from the next request on.
pub async fn revoke_key(ops: &Ops<'_>, operator: &Operator, key_id: Uuid, req: ReasonRequest) -> OpsResult<ApiKeyView> {
    ops.perform(operator, &ApiKeyRevoke::ACT, key_id.to_string(), &req.reason, json!({}), async |audited| {
        let reason = require_reason(&req.reason)?;
        let current = stored::get_api_key(ops.db, ApiKeyId(key_id)).await?.ok_or_else(OpsError::not_found)?;
        let done = Audited { parameters: json!({"account_id": current.account_id}), ..audited.clone_shallow() };
        let mut tx = ops.db.begin().await?;
        let Some(revoked) = stored::revoke_api_key(
            &mut tx,
            AccountId(current.account_id),
            ApiKeyId(key_id),
            &crate::redact::text(reason),
        )
        .await?
        else {
            return Err(OpsError::conflict("already_revoked", "this API key is already revoked"));
        };
        done.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        tracing::info!(key_id = %key_id, account_id = %revoked.account_id, operator = %operator.id, "API key revoked");
        Ok(key_view(&revoked))
    })
    .await
}

/// Every operator, oldest first, with status; no secrets.
pub async fn list_operators(ops: &Ops<'_>, operator: &Operator) -> OpsResult<List<OperatorView>> {
    ops.authorize(operator, &OperatorList::ACT, "").await?;
    let rows = stored::list_operators(ops.db).await?;
    Ok(List { data: rows.iter().map(operator_view).collect() })
}

/// Their token fails from the next request on and their console sessions end. The last enabled
/// admin cannot be disabled (409 `last_admin`).
pub async fn disable(
    ops: &Ops<'_>,
    operator: &Operator,
    target: OperatorId,
    req: ReasonRequest,
) -> OpsResult<OperatorView> {
    ops.perform(operator, &OperatorDisable::ACT, target.to_string(), &req.reason, json!({}), async |audited| {
        let reason = require_reason(&req.reason)?;
        let mut tx = ops.db.begin().await?;
        let row = match stored::disable_operator(&mut tx, target, &crate::redact::text(reason)).await? {
            Disabled::Done(row) => row,
            Disabled::NotFound => return Err(OpsError::not_found()),
            Disabled::AlreadyDisabled => {
                return Err(OpsError::conflict("already_disabled", "this operator is already disabled"))
            }
            Disabled::LastAdmin => {
                return Err(OpsError::conflict(
                    "last_admin",
                    "this is the last enabled admin: disabling them would leave nobody to administer the service. \
                     Create or enable another admin first (or rotate this admin's token instead)",
                ))
            }
        };
        let ended = sessions::end_all_for_operator(&mut tx, target).await?;
        let done = Audited { parameters: json!({"sessions_ended": ended}), ..audited.clone_shallow() };
        done.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        tracing::info!(target_operator = %target, operator = %operator.id, "operator disabled");
        Ok(OperatorView { sessions_ended: Some(ended), ..operator_view(&row) })
    })
    .await
}

/// Their current token works again (rotate it too if it may have leaked). Console sessions
/// ended by the disable stay ended.
pub async fn enable(
    ops: &Ops<'_>,
    operator: &Operator,
    target: OperatorId,
    req: ReasonRequest,
) -> OpsResult<OperatorView> {
    ops.perform(operator, &OperatorEnable::ACT, target.to_string(), &req.reason, json!({}), async |audited| {
        require_reason(&req.reason)?;
        if stored::get_operator(ops.db, target).await?.is_none() {
            return Err(OpsError::not_found());
        }
        let mut tx = ops.db.begin().await?;
        let Some(row) = stored::enable_operator(&mut tx, target, &issuer(operator)).await? else {
            return Err(OpsError::conflict("not_disabled", "this operator is not disabled"));
        };
        audited.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        tracing::info!(target_operator = %target, operator = %operator.id, "operator enabled");
        Ok(operator_view(&row))
    })
    .await
}

/// A new token, in this answer only; the old one fails from the next request on and the
/// operator's console sessions end. A disabled operator stays disabled (rotate, then enable,
/// after a leak). Every role may rotate their own token; another's needs an admin, and the new
/// token is then marked as issued by that admin, so it cannot approve that admin's requests.
pub async fn rotate_token(
    ops: &Ops<'_>,
    operator: &Operator,
    target: OperatorId,
    req: OptionalReason,
) -> OpsResult<OperatorView> {
    let own = target == operator.id;
    let reason = req.reason.as_deref().unwrap_or("");
    ops.perform(operator, &rotation_act(operator, target), target.to_string(), reason, json!({}), async |audited| {
        let reason = optional_reason(&req.reason, "token rotated")?;
        let issued = credentials::issue_with_id(OPERATOR_TOKEN_PREFIX, target.0);
        let mut tx = ops.db.begin().await?;
        let Some(row) = stored::rotate_operator_secret(&mut tx, target, &issued.secret_hash, &issuer(operator)).await?
        else {
            return Err(OpsError::not_found());
        };
        let ended = sessions::end_all_for_operator(&mut tx, target).await?;
        let done = Audited {
            reason,
            parameters: json!({"sessions_ended": ended, "self_rotation": own}),
            ..audited.clone_shallow()
        };
        done.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        tracing::info!(target_operator = %target, operator = %operator.id, "operator token rotated");
        Ok(OperatorView {
            token: Some(issued.token),
            own_token: Some(own),
            sessions_ended: Some(ended),
            ..operator_view(&row)
        })
    })
    .await
}

/// What a rotation of `target`'s token is authorised and audited as: any role for one's own
/// token, admin for another's.
pub fn rotation_act(operator: &Operator, target: OperatorId) -> super::Act {
    if target == operator.id {
        OperatorRotateOwnToken::ACT
    } else {
        OperatorRotateToken::ACT
    }
}

/// The role a rotation of `target`'s token needs, checked (and a refusal audited).
pub async fn authorize_rotation(ops: &Ops<'_>, operator: &Operator, target: OperatorId) -> OpsResult<()> {
    ops.authorize(operator, &rotation_act(operator, target), &target.to_string()).await
}

/// The operator as the issuer of a credential they write.
fn issuer(operator: &Operator) -> Issuer {
    Issuer { id: operator.id, name: operator.name.clone() }
}

/// Someone who runs a command with only `DATABASE_URL` (no token): `local:<os user>`. Their
/// actions are audited under the reserved [`LOCAL_ACTOR`] row, with this name and the admin role
/// (database access is every power). The OS user is what the process was told (`$USER`,
/// `$LOGNAME`), not proof of a person.
#[derive(Debug, Clone)]
pub struct LocalActor {
    name: String,
}

impl LocalActor {
    pub fn from_env() -> Self {
        let user = ["USER", "LOGNAME", "USERNAME"]
            .iter()
            .find_map(|var| std::env::var(var).ok().filter(|u| !u.trim().is_empty()))
            .unwrap_or_else(|| "unknown".to_owned());
        Self::named(&user)
    }

    /// `local:<user>`, the user's control characters dropped.
    pub fn named(user: &str) -> Self {
        let user: String = user.trim().chars().filter(|c| !c.is_control()).take(64).collect();
        LocalActor { name: format!("local:{user}") }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The actor as audit rows and issuers record it.
    pub fn as_operator(&self) -> Operator {
        Operator { id: LOCAL_ACTOR, name: self.name.clone(), role: Role::Admin }
    }
}

/// A new operator, created by a local actor (`withdrawals operators create`, only
/// `DATABASE_URL`): audited as `operator.create` with the actor, the credential marked as issued
/// by them — so it cannot approve a two-person decision until its holder rotates it themselves.
pub async fn create_locally(
    ops: &Ops<'_>,
    actor: &LocalActor,
    name: &str,
    role: Role,
) -> OpsResult<(OperatorId, String)> {
    let operator = actor.as_operator();
    let parameters = json!({"name": name, "role": role.as_str()});
    // The row the audit names, refusals included, must exist before either is written.
    let mut tx = ops.db.begin().await?;
    stored::ensure_local_actor(&mut tx).await?;
    tx.commit().await?;
    ops.perform(&operator, &OperatorCreate::ACT, "", "", parameters, async |audited| {
        let name = name.trim();
        if name.is_empty() || name.chars().count() > MAX_LABEL_CHARS || name.chars().any(char::is_control) {
            return Err(OpsError::invalid(
                "invalid_name",
                "name",
                format!("an operator name is 1 to {MAX_LABEL_CHARS} printable characters"),
            ));
        }
        let id = OperatorId::new();
        let issued = credentials::issue_with_id(OPERATOR_TOKEN_PREFIX, id.0);
        let mut tx = ops.db.begin().await?;
        stored::insert_operator(&mut tx, id, name, role, &issued.secret_hash, &issuer(&operator)).await?;
        let done = Audited { target_id: id.to_string(), ..audited.clone_shallow() };
        done.record_ok(&mut tx, &operator).await?;
        tx.commit().await?;
        tracing::info!(new_operator = %id, actor = %actor.name(), "operator created locally");
        Ok((id, issued.token))
    })
    .await
}
