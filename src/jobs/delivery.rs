//! What every notification delivery in a worker process shares (SPEC §17): the HTTP client of
//! [`crate::outbound`] (no redirects, public addresses only at connect time) and one circuit
//! breaker per endpoint, made on its first delivery, so a dead endpoint's deliveries wait for its
//! probe instead of each taking a worker slot for a timeout. The breakers live in this process
//! only and export no metric (an endpoint label would be unbounded); endpoints' health is read
//! from the database.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::NotifySettings;
use crate::domain::WebhookEndpointId;
use crate::outbound;
use crate::provider::breaker::{CircuitBreaker, SystemClock};

/// What every delivery in a process shares: the HTTP client (no redirects, public addresses
/// only) and one breaker per endpoint, made on its first delivery.
pub struct Deliverer {
    client: reqwest::Client,
    breakers: Mutex<HashMap<WebhookEndpointId, Arc<CircuitBreaker>>>,
}

impl Deliverer {
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    pub fn new(settings: &NotifySettings) -> Self {
        let client = outbound::client(settings.connect_timeout, settings.request_timeout, settings.allow_insecure);
        Self { client, breakers: Mutex::new(HashMap::new()) }
    }

    pub fn breaker(&self, endpoint: WebhookEndpointId, settings: &NotifySettings) -> Arc<CircuitBreaker> {
        let mut breakers = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        breakers
            .entry(endpoint)
            .or_insert_with(|| {
                let name = format!("endpoint {}", endpoint.wire());
                let breaker = CircuitBreaker::new(name, settings.breaker.clone(), Arc::new(SystemClock)).with_listener(
                    |name, from, to| {
                        tracing::warn!(breaker = name, %from, %to, "notification endpoint breaker changed state");
                    },
                );
                Arc::new(breaker)
            })
            .clone()
    }
}

impl std::fmt::Debug for Deliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deliverer").finish_non_exhaustive()
    }
}
