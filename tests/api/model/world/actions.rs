//! The steps as the world performs them: a customer's withdrawal, operators' decisions,
//! lookup outages, cancels, a late arrival, and the final settling of everything.

use super::*;

impl World {
    pub(super) async fn submit(
        &mut self,
        cents: u32,
        create: CreateFault,
        settle: Settle,
        lookups_down: bool,
        until_sent: bool,
    ) {
        let n = self.ws.len();
        // A destination of its own, so a create fault can match it before its id is known.
        let account_number = (7_100_000_000u64 + n as u64).to_string();
        self.set_settlement(settle);
        if let Some(effect) = create.effect() {
            let rule = FaultRule {
                account_number_contains: Some(account_number.clone()),
                times: Some(1),
                ..FaultRule::new(RouteMatch::Create, effect)
            };
            self.create_rules.push((None, rule));
            self.install_faults();
        }
        let amount = Decimal::new(i64::from(cents), 2);
        let body = json!({
            "amount": amount.to_string(),
            "currency": "USD",
            "destination": {"type": "bank_account", "account_number": account_number, "bank_code": "021000021"},
            "reference": format!("model {n}"),
        });
        let response = self
            .app
            .client
            .post(format!("{}/v1/withdrawals", self.api))
            .bearer_auth(&self.customer.api_key)
            .header("Idempotency-Key", format!("model-{n}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        if status != 201 {
            self.bug(format!("a withdrawal of {amount} from a funded account was refused: {status} {body}"));
        }
        let id = WithdrawalId(typed::<WithdrawalView>(body).id);
        for (rule_for, rule) in &mut self.create_rules {
            if rule.account_number_contains.as_deref() == Some(account_number.as_str()) {
                *rule_for = Some(id);
            }
        }
        self.ws.push(Tracked { id, amount, account_number, create, lookups_failed: false });
        self.trail.push(format!("  → withdrawal {n} is {id}"));
        self.coverage.saw(format!("submit: create {create:?}, settle {}", settle_name(settle)));
        if lookups_down {
            self.set_outage(id, true);
        }
        if until_sent {
            let deadline = Instant::now() + WAIT;
            let key = id.to_string();
            loop {
                let sent = self
                    .mock()
                    .requests()
                    .iter()
                    .any(|r| r.route == Route::Create && r.idempotency_key.as_deref() == Some(key.as_str()));
                if sent || self.withdrawal(id).await.status == WithdrawalStatus::Failed {
                    break;
                }
                if Instant::now() > deadline {
                    self.bug(format!("withdrawal {id} was not sent to the provider within {WAIT:?}"));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    pub(super) async fn operator_step(&mut self, pick: u8, op: Op, lift_outage: bool, on_arrival: bool) {
        let Some(target) = self.review_target(pick, on_arrival).await else { return };
        if lift_outage && self.outages.contains(&target) {
            self.set_outage(target, false);
        }
        self.resolve(target, op).await;
    }

    pub(super) async fn two_operators(&mut self, pick: u8, first: Op, second: Op) {
        let Some(target) = self.review_target(pick, true).await else { return };
        self.resolve_together(target, &[first, second]).await;
    }

    /// The `pick`th withdrawal in review, waiting for one to arrive if `on_arrival` (unless the
    /// system is quiescent); any withdrawal when none is in review.
    pub(super) async fn review_target(&self, pick: u8, on_arrival: bool) -> Option<WithdrawalId> {
        if on_arrival {
            let deadline = Instant::now() + WAIT;
            loop {
                let rows = self.withdrawals().await;
                if rows.iter().any(|w| w.status == WithdrawalStatus::RequiresReview) || self.busy(false).await.is_none()
                {
                    break;
                }
                if Instant::now() > deadline {
                    self.bug(format!("nothing reached review and the system did not settle within {WAIT:?}"));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let rows = self.withdrawals().await;
        if rows.is_empty() {
            return None;
        }
        let in_review: Vec<&Withdrawal> =
            rows.iter().filter(|w| w.status == WithdrawalStatus::RequiresReview).collect();
        Some(if in_review.is_empty() {
            rows[nth(pick, rows.len())].id
        } else {
            in_review[nth(pick, in_review.len())].id
        })
    }

    /// Sends one resolve and checks its answer against the model, and its effect.
    pub(super) async fn resolve(&mut self, id: WithdrawalId, op: Op) -> (u16, String) {
        self.resolve_together(id, &[op]).await.remove(0)
    }

    /// Sends one resolve per op at once, each from its own operator, all at the version read
    /// before; checks each answer against the model, that at most one decision moved the
    /// withdrawal, and that the one that did took effect.
    pub(super) async fn resolve_together(&mut self, id: WithdrawalId, ops: &[Op]) -> Vec<(u16, String)> {
        let before = self.view(id).await;
        let reconciliations_before = self.reconcile_jobs(id).await;
        let requests = ops.iter().enumerate().map(|(n, op)| {
            let provider_reference = match op {
                Op::CompleteWithProvidersId => {
                    Some(before.transfer_id.clone().unwrap_or_else(|| "tr_none_shown".into()))
                }
                Op::CompleteWithWrongId => Some(format!("tr_{}", uuid::Uuid::new_v4())),
                _ => None,
            };
            self.app
                .client
                .post(format!("{}/ops/v1/withdrawals/{id}/resolve", self.api))
                .bearer_auth(&self.operators[n % self.operators.len()])
                .json(&json!({"action": op.action(), "reason": "model test decision", "version": before.version,
                              "provider_reference": provider_reference}))
                .send()
        });
        let mut answers = Vec::new();
        for response in futures::future::join_all(requests).await {
            let response = response.unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            let code = if status < 300 { String::new() } else { body["code"].as_str().unwrap_or_default().to_owned() };
            answers.push((status, code, body));
        }
        let after = self.view(id).await;
        for (op, (status, code, body)) in ops.iter().zip(&answers) {
            self.trail.push(format!("  → {op:?} on {id} answered {status} {code} (provider shows {:?})", before.shown));
            let acceptable = acceptable_answers(*op, &before, &after);
            if !acceptable.iter().any(|(s, c)| s == status && c == code) {
                self.bug(format!(
                    "{op:?} ({}) on {id} answered {status} {code:?} ({body}), but the model allows only {acceptable:?}\n\
                     before: {before:#?}\nafter: {after:#?}",
                    op.action()
                ));
            }
            let together = if ops.len() > 1 { " (with another operator)" } else { "" };
            self.coverage.saw(format!("operator {op:?} on {:?}{together} → {status} {code}", before.shown));
        }
        let applied: Vec<Op> =
            ops.iter().zip(&answers).filter(|(op, a)| a.0 == 200 && **op != Op::Reconcile).map(|(op, _)| *op).collect();
        if applied.len() > 1 {
            self.bug(format!("{applied:?} on {id} were all applied to version {}: only one may be", before.version));
        }
        let w = self.withdrawal(id).await;
        let effect_ok = match applied.first() {
            Some(Op::Fail) => {
                w.status == WithdrawalStatus::Failed && w.failure_code.as_deref() == Some("rejected_by_operator")
            }
            Some(Op::CompleteWithProvidersId | Op::CompleteWithWrongId) => w.status == WithdrawalStatus::Completed,
            Some(Op::Retry) => w.version > before.version,
            Some(Op::Reconcile) | None => true,
        };
        // A reconciliation already running is the one asked for; otherwise a new one.
        let reconciled = !ops.iter().zip(&answers).any(|(op, a)| *op == Op::Reconcile && a.0 == 200)
            || before.reconciling
            || self.reconcile_jobs(id).await > reconciliations_before;
        if !effect_ok || !reconciled {
            self.bug(format!("{ops:?} on {id} answered {answers:?} but did not take effect: {w:#?}"));
        }
        answers.into_iter().map(|(status, code, _)| (status, code)).collect()
    }

    pub(super) async fn reconcile_jobs(&self, id: WithdrawalId) -> usize {
        job_store::jobs_for_withdrawal(&self.app.db, self.app.key(id).await)
            .await
            .unwrap()
            .iter()
            .filter(|j| j.kind == JobKind::ReconcilePayout.as_str())
            .count()
    }

    pub(super) async fn outage_step(&mut self, pick: u8, down: bool) {
        let candidates: Vec<WithdrawalId> = if down {
            let rows = self.withdrawals().await;
            rows.iter()
                .filter(|w| !matches!(w.status, WithdrawalStatus::Completed | WithdrawalStatus::Failed))
                .map(|w| w.id)
                .filter(|id| !self.outages.contains(id))
                .collect()
        } else {
            self.outages.iter().copied().collect()
        };
        if candidates.is_empty() {
            return;
        }
        let id = candidates[nth(pick, candidates.len())];
        self.set_outage(id, down);
        self.coverage.saw(if down { "lookups for one withdrawal start failing" } else { "lookups answer again" });
    }

    pub(super) async fn cancel(&mut self, pick: Option<u8>) {
        if self.ws.is_empty() {
            return;
        }
        let id = match pick {
            Some(pick) => self.ws[nth(pick, self.ws.len())].id,
            None => self.ws.last().unwrap().id,
        };
        let before = self.withdrawal(id).await;
        let response = self
            .app
            .client
            .post(format!("{}/v1/withdrawals/{id}/cancel", self.api))
            .bearer_auth(&self.customer.api_key)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let after = self.withdrawal(id).await;
        self.trail.push(format!("  → cancel of {id} ({}) answered {status}", before.status));
        let ok = match status {
            200 => {
                before.status == WithdrawalStatus::Pending
                    && after.status == WithdrawalStatus::Failed
                    && after.failure_code.as_deref() == Some("cancelled_by_customer")
            }
            409 => body["code"] == "withdrawal_not_cancellable" && after.status != WithdrawalStatus::Pending,
            _ => false,
        };
        if !ok {
            self.bug(format!(
                "cancel of {id} answered {status} {body}; it was {} before and {} after",
                before.status, after.status
            ));
        }
        self.coverage.saw(format!("cancel of a {} withdrawal → {status}", before.status));
    }

    pub(super) async fn late_arrival(&mut self, pick: u8) {
        // Only a request that may still be on its way: its attempt's outcome is unknown, it
        // started within the grace (with a margin for this request's own trip), and the provider
        // has nothing under the key.
        let transfers = self.mock().transfers();
        let mut candidates = Vec::new();
        for w in &self.ws {
            let last = attempts::for_withdrawal(&self.app.db, self.app.key(w.id).await).await.unwrap().pop();
            let may_land = last.is_some_and(|a| {
                a.side_effect == withdrawals::domain::SideEffect::Unknown
                    && a.started_at.0 + IN_FLIGHT_GRACE > Utc::now() + Duration::from_millis(200)
            });
            if may_land && Self::transfers_of(&transfers, w.id).is_empty() {
                candidates.push((w.id, w.amount, w.account_number.clone()));
            }
        }
        if candidates.is_empty() {
            return;
        }
        let (id, amount, account_number) = candidates[nth(pick, candidates.len())].clone();
        let response = self
            .app
            .client
            .post(format!("{}/v1/transfers", self.mock().url()))
            .bearer_auth("test-provider-key")
            .header("Idempotency-Key", id.to_string())
            .json(&json!({"reference": id.to_string(), "amount": amount.to_string(), "currency": "USD",
                          "destination": {"type": "bank_account", "account_number": account_number, "bank_code": "021000021"}}))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        self.trail.push(format!("  → the late request for {id} landed: {status}"));
        if !matches!(status, 200 | 201) {
            self.bug(format!("the late request for {id} was not taken: {status}"));
        }
        self.coverage.saw("a timed-out create lands late, within the grace");
    }

    /// Polls until no withdrawal is pending or processing and none has a live job (and, if
    /// asked, the provider has no pending transfer); past [`WAIT`] something is stuck.
    pub(super) async fn quiesce(&self, until_provider_settled: bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            let busy = self.busy(until_provider_settled).await;
            let Some(why) = busy else { return };
            if Instant::now() > deadline {
                self.bug(format!("not quiescent after {WAIT:?}: {why}"));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub(super) async fn busy(&self, until_provider_settled: bool) -> Option<String> {
        for w in self.withdrawals().await {
            if matches!(w.status, WithdrawalStatus::Pending | WithdrawalStatus::Processing) {
                return Some(format!("withdrawal {} is {}", w.id, w.status));
            }
            let jobs = job_store::jobs_for_withdrawal(&self.app.db, self.app.key(w.id).await).await.unwrap();
            if let Some(job) = jobs.iter().find(|j| matches!(j.status.as_str(), "scheduled" | "running")) {
                return Some(format!("withdrawal {} ({}) has a live {} job", w.id, w.status, job.kind));
            }
        }
        if until_provider_settled {
            let transfers = self.mock().transfers();
            for w in &self.ws {
                if Self::transfers_of(&transfers, w.id).iter().any(|t| t.status == TransferStatus::Pending) {
                    return Some(format!("the provider's transfer for {} is still pending", w.id));
                }
            }
        }
        None
    }

    /// The end of every case: the provider answers again and creates nothing new slowly, and
    /// each withdrawal in review is decided on the provider's record as an operator would. Then
    /// every withdrawal is `completed` or `failed`, and the money adds up against the provider.
    pub(super) async fn settle_everything(&mut self) {
        self.trail.push("settle everything".into());
        self.outages.clear();
        self.create_rules.clear();
        self.install_faults();
        self.set_settlement(Settle::Immediate);
        let deadline = Instant::now() + WAIT * 2;
        loop {
            self.quiesce(true).await;
            let in_review: Vec<WithdrawalId> = self
                .withdrawals()
                .await
                .into_iter()
                .filter(|w| w.status == WithdrawalStatus::RequiresReview)
                .map(|w| w.id)
                .collect();
            if in_review.is_empty() {
                break;
            }
            for id in in_review {
                let view = self.view(id).await;
                if view.in_flight || view.reconciling {
                    continue; // an operator waits for the attempt's grace or the reconciliation
                }
                let op = if view.shown == Shown::Paid { Op::CompleteWithProvidersId } else { Op::Fail };
                self.resolve(id, op).await;
            }
            self.check("an operator's settling decision").await;
            if Instant::now() > deadline {
                self.bug(format!("withdrawals still in review after {:?} of settling", WAIT * 2));
            }
            // An attempt's grace or a reconciliation still running: ask again shortly.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.check("settling everything").await;
        let (rows, (available, held, paid_out)) = self.snapshot().await;
        let transfers = self.mock().transfers();
        let paid_at_provider: Decimal = self
            .ws
            .iter()
            .flat_map(|w| Self::transfers_of(&transfers, w.id))
            .filter(|t| t.status == TransferStatus::Paid)
            .map(|t| t.amount)
            .sum();
        if let Some(open) =
            rows.iter().find(|w| !matches!(w.status, WithdrawalStatus::Completed | WithdrawalStatus::Failed))
        {
            self.bug(format!("withdrawal {} ended {}, not completed or failed", open.id, open.status));
        }
        if paid_out != paid_at_provider || held != Decimal::ZERO || available != self.funding - paid_at_provider {
            self.bug(format!(
                "settled: available {available}, held {held}, paid_out {paid_out}, but the provider paid \
                 {paid_at_provider} of funding {}",
                self.funding
            ));
        }
    }

    /// Records which paths the case took (attempt outcomes, reconciliation results, endings).
    pub(super) async fn tally(&mut self) {
        let transfers = self.mock().transfers();
        for w in &self.ws {
            for a in attempts::for_withdrawal(&self.app.db, self.app.key(w.id).await).await.unwrap() {
                self.coverage.saw(format!("attempt: {}", a.outcome.map_or("unfinished", |o| o.as_str())));
            }
            for r in reconciliations::for_withdrawal(&self.app.db, self.app.key(w.id).await).await.unwrap() {
                self.coverage.saw(format!("reconciliation: {}", r.result));
            }
            let end = store::find(&self.app.db, w.id).await.unwrap().unwrap();
            let slow = Self::transfers_of(&transfers, w.id).iter().any(|t| self.created_under_slow_settlement(t));
            self.coverage.saw(format!(
                "ended {} ({}){}",
                end.status,
                end.failure_code.as_deref().unwrap_or("-"),
                if slow { ", transfer settled slowly" } else { "" }
            ));
        }
    }
}
