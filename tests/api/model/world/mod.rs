//! The world a case runs in: the app, its worker, the provider mock, and the model beside
//! them; each step applied, and the invariants checked after it.

use super::*;

mod actions;
mod checks;

pub(super) async fn run_case(backend: Backend, name: &str, steps: Vec<Step>) -> Coverage {
    let mut world = World::start(backend).await;
    world.trail.push(format!("case: {name}"));
    world.check("start").await;
    for (n, step) in steps.iter().enumerate() {
        let label = format!("step {n}: {step:?}");
        world.trail.push(label.clone());
        world.apply(step).await;
        world.check(&label).await;
    }
    world.settle_everything().await;
    world.tally().await;
    world.coverage
}

// ---------------------------------------------------------------------------------------------
// The world: the app, its worker, the provider mock, and the model beside them.

/// A withdrawal the model asked for.
struct Tracked {
    id: WithdrawalId,
    amount: Decimal,
    account_number: String,
    create: CreateFault,
    /// Lookups for it were made to fail at some point.
    lookups_failed: bool,
}

struct World {
    app: TestApp,
    /// The app under test: its own state on the test's database, with the review grace and a
    /// breaker that never opens (the breaker is not under test here; an open one would add
    /// refusals and review paths the model does not track).
    api: String,
    /// Two operators' tokens (decisions taken together come from different people).
    operators: [String; 2],
    customer: Customer,
    funding: Decimal,
    ws: Vec<Tracked>,
    /// Withdrawals whose lookups fail now.
    outages: BTreeSet<WithdrawalId>,
    /// Create faults not yet spent: the withdrawal (once known) and its rule.
    create_rules: Vec<(Option<WithdrawalId>, FaultRule)>,
    /// When slow settlement was in force: transfers created then may outlast the reconciliation
    /// window (closed intervals; `slow_since` is the open one).
    slow_settlement: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    slow_since: Option<DateTime<Utc>>,
    trail: Vec<String>,
    coverage: Coverage,
}

impl World {
    async fn start(backend: Backend) -> World {
        let mut config = AppConfig::default();
        config.review.in_flight_grace = IN_FLIGHT_GRACE;
        let app = TestApp::spawn_with(backend, config.clone()).await;

        let mut worker = crate::harness::worker_config("w-model");
        worker.pending_poll = Duration::from_millis(50);
        worker.reconcile_policy.max_elapsed = RECONCILE_WINDOW;
        // A pending transfer is polled until the window closes, however many polls that takes:
        // with a cap of two unanswered lookups, a regression to a capped poll parks every
        // quick-settling withdrawal in review (two polls come within ~100 ms).
        worker.reconcile_policy.max_attempts = 2;
        worker.in_flight_grace = IN_FLIGHT_GRACE;
        app.start_worker(crate::harness::gateway_to(app.provider.mock.url(), PROVIDER_TIMEOUT), worker);

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = format!("http://{}", listener.local_addr().unwrap());
        let ops_gateway = crate::harness::gateway_to(app.provider.mock.url(), Duration::from_secs(2));
        let state = withdrawals::http::AppState::with_gateway(app.db.clone(), config, ops_gateway);
        tokio::spawn(withdrawals::startup::serve(listener, state, app.shutdown_token()));

        let operators = [app.operator("operator").await, app.operator("operator").await];
        let customer = app.customer(FUNDING).await;
        World {
            app,
            api,
            operators,
            customer,
            funding: Decimal::from_str(FUNDING).unwrap(),
            ws: Vec::new(),
            outages: BTreeSet::new(),
            create_rules: Vec::new(),
            slow_settlement: Vec::new(),
            slow_since: None,
            trail: Vec::new(),
            coverage: Coverage::default(),
        }
    }

    /// Fails the case with what was done so far.
    fn bug(&self, what: String) -> ! {
        panic!("{what}\n\nwhat the case did:\n  {}", self.trail.join("\n  "))
    }

    fn mock(&self) -> &provider_mocks::RunningMock {
        &self.app.provider.mock
    }

    async fn apply(&mut self, step: &Step) {
        match step {
            Step::Submit { cents, create, settle, lookups_down, until_sent } => {
                self.submit(*cents, *create, *settle, *lookups_down, *until_sent).await
            }
            Step::Operator { pick, op, lift_outage, on_arrival } => {
                self.operator_step(*pick, *op, *lift_outage, *on_arrival).await
            }
            Step::TwoOperators { pick, first, second } => self.two_operators(*pick, *first, *second).await,
            Step::Outage { pick, down } => self.outage_step(*pick, *down).await,
            Step::Cancel { pick } => self.cancel(*pick).await,
            Step::LateArrival { pick } => self.late_arrival(*pick).await,
            Step::Advance { until_provider_settled } => self.quiesce(*until_provider_settled).await,
        }
    }

    // -- provider behaviour ---------------------------------------------------------------

    fn set_settlement(&mut self, settle: Settle) {
        let settlement = match settle {
            Settle::Immediate => Settlement::default(),
            Settle::Async { delay_ms, fails } => {
                Settlement { mode: SettlementMode::Async, delay_ms, fail_ratio: if fails { 1.0 } else { 0.0 } }
            }
        };
        if settle.slow() && self.slow_since.is_none() {
            self.slow_since = Some(Utc::now());
        }
        self.mock().set_settlement(settlement);
        if !settle.slow() {
            if let Some(since) = self.slow_since.take() {
                self.slow_settlement.push((since, Utc::now()));
            }
        }
    }

    fn created_under_slow_settlement(&self, t: &TransferRecord) -> bool {
        self.slow_since.is_some_and(|since| t.created_at >= since)
            || self.slow_settlement.iter().any(|(from, to)| t.created_at >= *from && t.created_at <= *to)
    }

    /// Installs the model's fault rules: unspent create faults and the lookup outages. The mock
    /// renews every rule's budget on install, so a create fault whose withdrawal already reached
    /// the provider is dropped first (it was spent on that first create).
    fn install_faults(&mut self) {
        let requests = self.mock().requests();
        self.create_rules.retain(|(id, _)| {
            id.is_none_or(|id| {
                let key = id.to_string();
                !requests.iter().any(|r| r.route == Route::Create && r.idempotency_key.as_deref() == Some(key.as_str()))
            })
        });
        let mut rules: Vec<FaultRule> = self.create_rules.iter().map(|(_, rule)| rule.clone()).collect();
        rules.extend(self.outages.iter().map(|id| FaultRule {
            idempotency_key: Some(id.to_string()),
            ..FaultRule::new(RouteMatch::Lookup, FaultEffect::LookupUnavailable)
        }));
        self.mock().set_faults(FaultConfig { rules });
    }

    fn set_outage(&mut self, id: WithdrawalId, down: bool) {
        if down {
            self.tracked_mut(id).lookups_failed = true;
            self.outages.insert(id);
        } else {
            self.outages.remove(&id);
        }
        self.install_faults();
    }

    fn tracked_mut(&mut self, id: WithdrawalId) -> &mut Tracked {
        self.ws.iter_mut().find(|w| w.id == id).expect("a tracked withdrawal")
    }

    fn tracked(&self, id: WithdrawalId) -> &Tracked {
        self.ws.iter().find(|w| w.id == id).expect("a tracked withdrawal")
    }

    // -- reading the world ------------------------------------------------------------------
}
