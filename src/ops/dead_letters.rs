//! Dead-letter triage (SPEC §8.2): filtered, paginated lists; the summary by category and error
//! code (triage step one); one envelope with what happened to it since; close with a reason
//! (archived, never deleted).

use chrono::Utc;
use uuid::Uuid;

use super::acts::DeadLetterClose;
use super::types::{
    Closed, DeadLetterEventView, DeadLetterExportQuery, DeadLetterGroup, DeadLetterQuery, DeadLetterView, List, Page,
    ReasonRequest,
};
use super::{
    decode_cursor, encode_cursor, page, page_limit, require_reason, Action, Operator, Ops, OpsError, OpsResult, Role,
};
use crate::domain::{DeadLetterId, JobStatus, LetterEvent, LetterState};
use crate::storage::dead_letters::{self, DeadLetter, DeadLetterFilter, Event};
use crate::storage::DbTime;

/// One envelope as operators see it; `closed_at` says whether it is still open.
pub fn view(d: &DeadLetter, closed_at: Option<DbTime>) -> DeadLetterView {
    DeadLetterView {
        id: d.id.0,
        job_id: d.job_id.0,
        queue: d.queue.clone(),
        job_type: d.job_type.clone(),
        payload_version: d.payload_version,
        payload: d.payload.as_ref().map(|p| p.0.clone()),
        raw_payload: d.raw_payload.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()),
        attempts: d.attempts,
        first_attempt_at: d.first_attempt_at.map(|t| t.0),
        failed_at: d.failed_at.0,
        error_code: d.error_code.clone(),
        error_class: d.error_class.clone(),
        error_message: d.error_message.clone(),
        stack: d.stack.clone(),
        worker_host: d.worker_host.clone(),
        worker_version: d.worker_version.clone(),
        correlation_id: d.correlation_id.clone(),
        idempotency_key: d.idempotency_key.clone(),
        withdrawal_id: d.withdrawal_id.map(|w| w.0),
        side_effect_state: d.side_effect_state,
        category: d.category,
        owner: d.owner.clone(),
        runbook: d.runbook.clone(),
        provider: d.provider.clone(),
        state: if closed_at.is_some() { LetterState::Closed } else { LetterState::Open },
        closed_at: closed_at.map(|t| t.0),
        age_seconds: (Utc::now() - d.failed_at.0).num_seconds(),
        events: None,
    }
}

/// A handling event as operators see it; `replay_job_status` only where it was looked up.
fn event_view(e: &Event, replay_job_status: Option<Option<JobStatus>>) -> DeadLetterEventView {
    DeadLetterEventView {
        action: e.action,
        actor: e.actor.clone(),
        reason: e.reason.clone(),
        details: e.details.as_ref().map(|d| d.0.clone()),
        at: e.at.0,
        replay_job_status,
    }
}

/// One page of dead letters, newest (or oldest) first, by the triage filters.
pub async fn list(ops: &Ops<'_>, operator: &Operator, q: DeadLetterQuery) -> OpsResult<Page<DeadLetterView>> {
    operator.require(Role::Viewer)?;
    let open = match q.state.as_deref().unwrap_or("open") {
        "open" => Some(true),
        "closed" => Some(false),
        "all" => None,
        _ => return Err(OpsError::invalid("invalid_state", "state", "state must be open, closed or all")),
    };
    let oldest_first = match q.order.as_deref().unwrap_or("newest_first") {
        "newest_first" => false,
        "oldest_first" => true,
        _ => return Err(OpsError::invalid("invalid_order", "order", "order must be newest_first or oldest_first")),
    };
    let limit = page_limit(q.limit)?;
    let filter = DeadLetterFilter {
        queue: q.queue,
        job_type: q.job_type,
        error_code: q.error_code,
        category: q.category,
        failed_after: q.failed_after.map(DbTime::from),
        failed_before: q.failed_before.map(DbTime::from),
        open,
        after: q.cursor.as_deref().map(decode_cursor).transpose()?,
        oldest_first,
        limit: limit + 1,
    };
    let rows = dead_letters::list(ops.db, &filter).await?;
    Ok(page(rows, limit, |r| encode_cursor(r.letter.failed_at, r.letter.id.0), |r| view(&r.letter, r.closed_at)))
}

/// For archive (SPEC §5): the envelopes that failed before `before` (of one category, or all),
/// open and closed, oldest first, each with its handling events as stored. Deletes nothing; the
/// CLI writes one JSON object per line (`withdrawals dlq export`).
pub async fn export(ops: &Ops<'_>, operator: &Operator, q: DeadLetterExportQuery) -> OpsResult<Page<DeadLetterView>> {
    operator.require(Role::Viewer)?;
    let before = q.before.ok_or_else(|| OpsError::invalid("before_required", "before", "before is required"))?;
    if let Some(category) = &q.category {
        category
            .parse::<crate::domain::Category>()
            .map_err(|_| OpsError::invalid("invalid_category", "category", "unknown dead-letter category"))?;
    }
    let limit = page_limit(q.limit)?;
    let filter = DeadLetterFilter {
        category: q.category,
        failed_before: Some(DbTime::from(before)),
        open: None,
        after: q.cursor.as_deref().map(decode_cursor).transpose()?,
        oldest_first: true,
        limit: limit + 1,
        ..DeadLetterFilter::default()
    };
    let rows = dead_letters::list(ops.db, &filter).await?;
    let ids: Vec<_> = rows.iter().take(limit as usize).map(|r| (r.letter.account_id, r.letter.id)).collect();
    let events = dead_letters::events_of(ops.db, &ids).await?;
    Ok(page(
        rows,
        limit,
        |r| encode_cursor(r.letter.failed_at, r.letter.id.0),
        |r| {
            let mut body = view(&r.letter, r.closed_at);
            body.events =
                Some(events.iter().filter(|e| e.dead_letter_id == r.letter.id).map(|e| event_view(e, None)).collect());
            body
        },
    ))
}

/// Open dead letters by category and error code, with the oldest's age.
pub async fn summary(ops: &Ops<'_>, operator: &Operator) -> OpsResult<List<DeadLetterGroup>> {
    operator.require(Role::Viewer)?;
    let now = Utc::now();
    let data = dead_letters::summary(ops.db)
        .await?
        .into_iter()
        .map(|g| DeadLetterGroup {
            category: g.category,
            error_code: g.error_code.clone(),
            open: g.open,
            oldest_open_at: g.oldest_open.map(|t| t.0),
            oldest_open_age_seconds: g.oldest_open.map(|t| (now - t.0).num_seconds()),
        })
        .collect();
    Ok(List { data })
}

/// One envelope and its events (closed, replayed — with the replayed job's status).
pub async fn show(ops: &Ops<'_>, operator: &Operator, id: DeadLetterId) -> OpsResult<DeadLetterView> {
    operator.require(Role::Viewer)?;
    let letter = dead_letters::get(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
    let events = dead_letters::events(ops.db, &letter).await?;
    let closed_at = events.iter().find(|e| e.action == LetterEvent::Closed).map(|e| e.at);
    let mut shown = Vec::new();
    for e in &events {
        // A replay's outcome: the status of the job it released.
        let job = e.details.as_ref().and_then(|d| d.0["job_id"].as_str().and_then(|j| Uuid::parse_str(j).ok()));
        let replay_job_status = match job {
            // A released job is the letter's account's, as the letter's withdrawal is.
            Some(job) => {
                let key = crate::domain::JobKey { account: letter.account_id, id: crate::domain::JobId(job) };
                Some(crate::storage::jobs::job_status(ops.db, key).await?)
            }
            None => None,
        };
        shown.push(event_view(e, replay_job_status));
    }
    let mut body = view(&letter, closed_at);
    body.events = Some(shown);
    Ok(body)
}

/// Closes an open dead letter with a reason (it stays, archived).
pub async fn close(ops: &Ops<'_>, operator: &Operator, id: DeadLetterId, req: ReasonRequest) -> OpsResult<Closed> {
    ops.perform(operator, &DeadLetterClose::ACT, id.to_string(), &req.reason, serde_json::json!({}), async |audited| {
        let reason = require_reason(&req.reason)?;
        let letter = dead_letters::get(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
        let mut tx = ops.db.begin().await?;
        let event = Event {
            id: crate::domain::DeadLetterEventId::new(),
            account_id: letter.account_id,
            dead_letter_id: id,
            action: LetterEvent::Closed,
            actor: format!("operator:{}", operator.id),
            reason: crate::redact::text(reason),
            details: None,
            at: DbTime::now(),
        };
        if !dead_letters::add_event(&mut tx, &event).await? {
            return Err(OpsError::conflict("already_closed", "this dead letter is already closed"));
        }
        audited.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        Ok(Closed { id: id.0, state: LetterState::Closed, closed_at: event.at.0 })
    })
    .await
}
