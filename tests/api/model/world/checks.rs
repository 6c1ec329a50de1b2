//! The world read as one consistent snapshot, and the invariants checked after every step.

use super::*;

impl World {
    pub(super) async fn withdrawal(&self, id: WithdrawalId) -> Withdrawal {
        store::find(&self.app.db, id).await.unwrap().expect("the withdrawal exists")
    }

    pub(super) async fn withdrawals(&self) -> Vec<Withdrawal> {
        let mut rows = Vec::with_capacity(self.ws.len());
        for w in &self.ws {
            rows.push(self.withdrawal(w.id).await);
        }
        rows
    }

    /// (available, held, paid_out) in USD, as the customer API reports them.
    pub(super) async fn balances(&self) -> (Decimal, Decimal, Decimal) {
        let request = self.app.client.get(format!("{}/v1/balances", self.api)).bearer_auth(&self.customer.api_key);
        let balances: BalanceList = read(request.send().await.unwrap()).await;
        let usd = balances.data.into_iter().find(|b| b.currency == "USD").expect("a USD balance");
        let field = |value: &str| Decimal::from_str(value).unwrap();
        (field(&usd.available), field(&usd.held), field(&usd.paid_out))
    }

    /// The withdrawals and the balances at one instant: every transition moves the version and
    /// the ledger in one transaction, so versions unchanged around the balance read mean the
    /// balances belong to exactly these states.
    pub(super) async fn snapshot(&self) -> (Vec<Withdrawal>, (Decimal, Decimal, Decimal)) {
        let versions = |rows: &[Withdrawal]| rows.iter().map(|w| w.version).collect::<Vec<_>>();
        for _ in 0..100 {
            let first = self.withdrawals().await;
            let balances = self.balances().await;
            let second = self.withdrawals().await;
            if versions(&first) == versions(&second) {
                return (second, balances);
            }
        }
        self.bug("no consistent snapshot in 100 tries".into())
    }

    /// The provider's transfers for withdrawal `id` (by its reference, which is its id).
    pub(super) fn transfers_of(all: &[TransferRecord], id: WithdrawalId) -> Vec<&TransferRecord> {
        let id = id.to_string();
        all.iter().filter(|t| t.reference == id || t.idempotency_key == id).collect()
    }

    pub(super) async fn view(&self, id: WithdrawalId) -> View {
        let w = self.withdrawal(id).await;
        let transfers = self.mock().transfers();
        let transfer = Self::transfers_of(&transfers, id).into_iter().next().cloned();
        let shown = match transfer.as_ref().map(|t| t.status) {
            None => Shown::Nothing,
            Some(TransferStatus::Pending) => Shown::Pending,
            Some(TransferStatus::Paid | TransferStatus::Returned) => Shown::Paid,
            Some(TransferStatus::Failed) => Shown::Failed,
        };
        let key = self.app.key(id).await;
        let last = attempts::for_withdrawal(&self.app.db, key).await.unwrap().pop();
        let in_flight = match last.filter(|a| a.side_effect == withdrawals::domain::SideEffect::Unknown) {
            None => false,
            Some(a) => {
                a.started_at.0 + IN_FLIGHT_GRACE > Utc::now()
                    || job_store::job_status(
                        &self.app.db,
                        withdrawals::domain::JobKey { account: key.account, id: a.job_id },
                    )
                    .await
                    .unwrap()
                    .map(|s| s.as_str())
                        == Some("running")
            }
        };
        let jobs = job_store::jobs_for_withdrawal(&self.app.db, self.app.key(id).await).await.unwrap();
        let reconciling = jobs.iter().any(|j| {
            j.kind == JobKind::ReconcilePayout.as_str() && matches!(j.status.as_str(), "scheduled" | "running")
        });
        View {
            status: w.status,
            version: w.version,
            shown,
            transfer_id: transfer.map(|t| t.id),
            outage: self.outages.contains(&id),
            in_flight,
            reconciling,
        }
    }

    // -- the invariants -----------------------------------------------------------------------

    /// The model's checks, after every step (see the module docs).
    pub(super) async fn check(&self, after: &str) {
        let sent_before = self.mock().transfers();
        let (rows, (available, held, paid_out)) = self.snapshot().await;
        let transfers = self.mock().transfers();
        let mut settled = Decimal::ZERO;
        let mut open = Decimal::ZERO;
        for w in &rows {
            let mine = Self::transfers_of(&transfers, w.id);
            if mine.len() > 1 || mine.iter().any(|t| t.executions != 1 || t.idempotency_key != w.id.to_string()) {
                self.bug(format!("after {after}: withdrawal {} paid more than once: {mine:#?}", w.id));
            }
            let transfer = mine.first().copied();
            let amount = w.amount.value();
            if amount != self.tracked(w.id).amount || w.amount.currency().code() != "USD" {
                self.bug(format!(
                    "after {after}: withdrawal {} holds {}, the customer asked for {} USD",
                    w.id,
                    w.amount.value(),
                    self.tracked(w.id).amount
                ));
            }
            match w.status {
                WithdrawalStatus::Completed => {
                    match transfer {
                        Some(t) if t.status == TransferStatus::Paid && t.amount == amount => {}
                        other => self.bug(format!(
                            "after {after}: withdrawal {} is completed ({amount}) but the provider shows {other:#?}",
                            w.id
                        )),
                    }
                    settled += amount;
                }
                WithdrawalStatus::Failed => {
                    if transfer.is_some_and(|t| t.status != TransferStatus::Failed) {
                        self.bug(format!(
                            "after {after}: withdrawal {} is failed (funds released, {:?}) but the provider shows {transfer:#?}",
                            w.id, w.failure_code
                        ));
                    }
                }
                WithdrawalStatus::Pending => {
                    if !Self::transfers_of(&sent_before, w.id).is_empty() {
                        self.bug(format!("after {after}: withdrawal {} is pending but was already sent", w.id));
                    }
                    open += amount;
                }
                WithdrawalStatus::Processing => open += amount,
                WithdrawalStatus::RequiresReview => {
                    let tracked = self.tracked(w.id);
                    let excused = tracked.create == CreateFault::Rejected
                        || tracked.lookups_failed
                        || transfer.is_some_and(|t| self.created_under_slow_settlement(t));
                    if !excused {
                        self.bug(format!(
                            "after {after}: withdrawal {} is in requires_review with no reason the model gave it \
                             (the provider answers its lookups and settles quickly); provider shows {transfer:#?}",
                            w.id
                        ));
                    }
                    open += amount;
                }
            }
        }
        let paid_at_provider: Decimal = rows
            .iter()
            .filter(|w| w.status == WithdrawalStatus::Completed)
            .flat_map(|w| Self::transfers_of(&transfers, w.id))
            .filter(|t| t.status == TransferStatus::Paid)
            .map(|t| t.amount)
            .sum();
        if paid_out != settled || paid_out != paid_at_provider {
            self.bug(format!(
                "after {after}: paid_out {paid_out}, but the completed withdrawals sum to {settled} and the provider \
                 paid {paid_at_provider} for them"
            ));
        }
        if held != open {
            self.bug(format!("after {after}: held {held}, but the open withdrawals sum to {open}"));
        }
        if available + held + paid_out != self.funding {
            self.bug(format!(
                "after {after}: available {available} + held {held} + paid_out {paid_out} != funding {}",
                self.funding
            ));
        }
        self.app.assert_ledger_invariant().await;
    }

    // -- the steps ------------------------------------------------------------------------------
}
