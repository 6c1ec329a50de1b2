//! A worker process's settings (SPEC §5): which queues, how many jobs at once, leases and
//! heartbeats, one retry policy per job kind, the breaker-open deferral, and the settlement
//! schedule, with their defaults (`WorkerConfig::new`; the CLI's flags read theirs from here).

use std::time::Duration;

use super::RetryPolicy;
use crate::domain::job::Queue;

/// How a worker runs. Every duration is data, so tests can run the same code fast.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub worker_id: String,
    pub queues: Vec<&'static str>,
    /// Customer notifications' delivery (SPEC §17): the `notifications` queue runs on its own
    /// `notify.concurrency` slots.
    pub notify: super::NotifySettings,
    /// Jobs running at once in this worker.
    pub concurrency: usize,
    /// Jobs claimed per round trip.
    pub batch_size: u32,
    pub lease: Duration,
    /// How often a running job extends its lease; zero disables heartbeats (the lease must then
    /// outlast the longest job).
    pub heartbeat: Duration,
    /// Polling fallback when no notification arrives.
    pub poll_interval: Duration,
    /// A job whose lease expired this many times is dead-lettered as `crashed`.
    pub max_receives: i64,
    /// A handler that fails (rather than deciding the job's outcome) is run again under this
    /// policy: exponential backoff with full jitter, counted in consecutive failed runs, its time
    /// budget from the job's creation. Exhausted, the job is dead-lettered as `infrastructure`
    /// when the last failure was our database's (SPEC §5), as `code_bug` otherwise.
    pub handler_error_policy: RetryPolicy,
    /// How long shutdown waits for in-flight jobs before handing them back.
    pub shutdown_grace: Duration,
    pub submit_policy: RetryPolicy,
    /// Added at random to a breaker deferral so deferred jobs don't stampede the probe.
    pub breaker_jitter: Duration,
    /// The shortest breaker deferral (a half-open breaker whose probes are busy says "now").
    pub breaker_min_defer: Duration,
    /// When a `pending` transfer is first polled.
    pub pending_poll: Duration,
    /// Webhooks count as healthy while the last provider event arrived less than this long ago
    /// (`WEBHOOK_HEALTHY_S`, SPEC §15).
    pub webhook_healthy_within: Duration,
    /// While webhooks are healthy, a pending transfer is polled no more often than this
    /// (`PENDING_POLL_WITH_WEBHOOKS_MS`): the event will say when it settles, polling is the
    /// safety net. When they stop, polling returns to the reconciliation policy's pace by itself.
    pub pending_poll_with_webhooks: Duration,
    /// Policy of the reconciliation job: its `max_elapsed` is the reconciliation window.
    pub reconcile_policy: RetryPolicy,
    /// Policy of a settlement import whose report the provider could not serve (its own, not
    /// reconciliation's).
    pub import_policy: RetryPolicy,
    /// A withdrawal in `processing` longer than this with no live job is swept into reconciliation.
    pub processing_sla: Duration,
    pub sweep_interval: Duration,
    /// How long an attempt may still be in flight at the provider (its request timeout plus a
    /// margin). Reconciliation does not trust "not found" for an attempt younger than this.
    pub in_flight_grace: Duration,
    /// This worker pays through a sandbox provider: it pays only withdrawals marked `sandbox`,
    /// and a real worker never pays those.
    pub sandbox: bool,
    /// The daily settlement import and its grace days (SPEC §14).
    pub settlement: crate::config::SettlementSettings,
    /// The providers file, validated (SPEC §16); `None` with a lone `PROVIDER_URL` or none.
    pub providers: Option<crate::config::providers::Providers>,
    /// Each provider's payout retry policy where the providers file changes `submit_policy`.
    pub provider_submit_policies: std::collections::BTreeMap<String, RetryPolicy>,
}

impl WorkerConfig {
    /// Each provider's retry keys applied over this process's `submit_policy` (SPEC §16); call it
    /// once the process's own settings are in.
    pub fn learn_provider_policies(&mut self, providers: &crate::config::providers::Providers) -> Result<(), String> {
        for provider in providers.all() {
            if let Some(retry) = &provider.retry {
                let policy =
                    retry.over(&self.submit_policy).map_err(|e| format!("provider `{}`: {e}", provider.name))?;
                self.provider_submit_policies.insert(provider.name.clone(), policy);
            }
        }
        Ok(())
    }

    /// The payout retry policy of provider `name` (SPEC §16): its own, or `submit_policy`.
    pub fn submit_policy_for(&self, name: &str) -> &RetryPolicy {
        self.provider_submit_policies.get(name).unwrap_or(&self.submit_policy)
    }

    /// How long a job waits when the breaker is open (SPEC §5): until the breaker's next probe
    /// (`retry_in`), at least `breaker_min_defer`, plus up to `breaker_jitter` at random so the
    /// deferred jobs do not stampede the probe. The one deferral of submit and reconcile.
    pub fn breaker_deferral(&self, retry_in: Duration) -> Duration {
        let jitter_ms = u64::try_from(self.breaker_jitter.as_millis()).unwrap_or(u64::MAX);
        retry_in.max(self.breaker_min_defer)
            + Duration::from_millis(rand::Rng::gen_range(&mut rand::thread_rng(), 0..=jitter_ms))
    }

    /// Refuses settings that would break the worker's own guarantees.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.concurrency > 0 && self.batch_size > 0, "concurrency and batch size must be positive");
        anyhow::ensure!(
            !self.lease.is_zero() && !self.poll_interval.is_zero(),
            "lease and poll interval must be positive"
        );
        anyhow::ensure!(
            self.heartbeat.is_zero() || self.heartbeat * 2 < self.lease,
            "the heartbeat ({:?}) must be shorter than half the lease ({:?}), or zero to disable it",
            self.heartbeat,
            self.lease
        );
        anyhow::ensure!(!self.sweep_interval.is_zero(), "the sweep interval must be positive");
        anyhow::ensure!(self.max_receives > 0, "limits must be positive");
        self.handler_error_policy.validate().map_err(|e| anyhow::anyhow!("handler error policy: {e}"))?;
        self.submit_policy.validate().map_err(|e| anyhow::anyhow!("submit policy: {e}"))?;
        for (name, policy) in &self.provider_submit_policies {
            policy.validate().map_err(|e| anyhow::anyhow!("provider {name}'s retry policy: {e}"))?;
        }
        self.reconcile_policy.validate().map_err(|e| anyhow::anyhow!("reconcile policy: {e}"))?;
        self.import_policy.validate().map_err(|e| anyhow::anyhow!("settlement import policy: {e}"))?;
        Ok(())
    }

    pub fn new(worker_id: impl Into<String>) -> Self {
        Self {
            worker_id: worker_id.into(),
            queues: Queue::ALL.map(Queue::as_str).to_vec(),
            notify: super::NotifySettings::default(),
            concurrency: 16,
            batch_size: 16,
            lease: Duration::from_secs(30),
            heartbeat: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            max_receives: 5,
            handler_error_policy: RetryPolicy::handler_errors(),
            shutdown_grace: Duration::from_secs(10),
            submit_policy: RetryPolicy::payout_submit(),
            breaker_jitter: Duration::from_secs(1),
            breaker_min_defer: Duration::from_secs(1),
            pending_poll: Duration::from_secs(5),
            webhook_healthy_within: Duration::from_secs(15 * 60),
            pending_poll_with_webhooks: Duration::from_secs(10 * 60),
            reconcile_policy: RetryPolicy::reconciliation(),
            import_policy: RetryPolicy::settlement_import(),
            processing_sla: Duration::from_secs(15 * 60),
            sweep_interval: Duration::from_secs(60),
            in_flight_grace: Duration::from_secs(15),
            sandbox: false,
            settlement: crate::config::SettlementSettings::default(),
            providers: None,
            provider_submit_policies: std::collections::BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_breaker_deferral_waits_for_the_probe_at_least_the_minimum_plus_bounded_jitter() {
        let mut config = WorkerConfig::new("w");
        config.breaker_min_defer = Duration::from_millis(500);
        config.breaker_jitter = Duration::from_millis(100);
        for _ in 0..200 {
            let short = config.breaker_deferral(Duration::from_millis(10));
            assert!(short >= Duration::from_millis(500) && short <= Duration::from_millis(600), "{short:?}");
            let long = config.breaker_deferral(Duration::from_secs(5));
            assert!(long >= Duration::from_secs(5) && long <= Duration::from_millis(5_100), "{long:?}");
        }
        config.breaker_jitter = Duration::ZERO;
        assert_eq!(config.breaker_deferral(Duration::from_secs(2)), Duration::from_secs(2));
    }
}
