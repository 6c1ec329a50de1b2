//! Fault rules: their scenario-file format, and the engine that decides, for
//! one request, which latency to add and which (at most one) terminal fault
//! to apply. Decisions draw from the mock's seeded RNG so a run is repeatable
//! for a given seed and request order.

use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::model::Route;

/// The fault rules in force, evaluated in order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultConfig {
    pub rules: Vec<FaultRule>,
}

/// Which routes a rule applies to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteMatch {
    Create,
    Lookup,
    Get,
    #[default]
    Any,
}

impl RouteMatch {
    fn matches(self, route: Route) -> bool {
        matches!(
            (self, route),
            (RouteMatch::Any, _)
                | (RouteMatch::Create, Route::Create)
                | (RouteMatch::Lookup, Route::Lookup)
                | (RouteMatch::Get, Route::Get)
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    #[serde(default)]
    pub route: RouteMatch,
    /// Chance that a matching request gets the effect (drawn from the seeded RNG).
    #[serde(default = "one")]
    pub probability: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_number_contains: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_contains: Option<String>,
    /// Exact idempotency key (the header on create, the query param on lookup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Apply to at most this many requests, then the rule is spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
    pub effect: FaultEffect,
}

impl FaultRule {
    /// A rule that always applies `effect` on `route`; refine with struct update.
    pub fn new(route: RouteMatch, effect: FaultEffect) -> Self {
        FaultRule {
            route,
            probability: 1.0,
            account_number_contains: None,
            reference_contains: None,
            idempotency_key: None,
            times: None,
            effect,
        }
    }
}

fn one() -> f64 {
    1.0
}

/// A client gives up long before this; the default only has to outlast it.
fn default_hold_ms() -> u64 {
    30_000
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultEffect {
    /// Answer `code` with `{"code":"fault_injected"}`, executing nothing.
    Status {
        code: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_secs: Option<u64>,
    },
    /// Wait, then go on; the only effect that composes with others.
    Latency { ms: u64 },
    /// Execute nothing, hold the request, then drop the connection unanswered.
    TimeoutBeforeCommit {
        #[serde(default = "default_hold_ms")]
        ms: u64,
    },
    /// Execute, hold the request, then drop the connection unanswered.
    TimeoutAfterCommit {
        #[serde(default = "default_hold_ms")]
        ms: u64,
    },
    /// Execute, then drop the connection at once without any response.
    ResetAfterCommit,
    /// Answer 422 `invalid_account` without executing (create only).
    InvalidAccount,
    /// Execute, but the transfer is created `failed` with this code (create only).
    SettleFailed { failure_code: String },
    /// Answer 503 without looking anything up (lookup and get only).
    LookupUnavailable,
    /// The amount is off by `add` (a provider bug, SPEC §4 "mismatch"): on
    /// create the transfer is executed for the requested amount plus `add`;
    /// on lookup and get the answer shows its amount plus `add`.
    WrongAmount {
        #[serde(with = "rust_decimal::serde::str")]
        add: rust_decimal::Decimal,
    },
}

impl FaultEffect {
    /// Effects that make no sense on a route never match there, so a rule
    /// with `route: any` can mix them without surprises.
    fn applies_to(&self, route: Route) -> bool {
        match self {
            FaultEffect::InvalidAccount | FaultEffect::SettleFailed { .. } => route == Route::Create,
            FaultEffect::LookupUnavailable => route != Route::Create,
            _ => true,
        }
    }
}

/// What the engine needs to know about a request to match rules.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FaultContext<'a> {
    pub route: Route,
    pub idempotency_key: Option<&'a str>,
    pub reference: Option<&'a str>,
    pub account_number: Option<&'a str>,
}

/// The faults chosen for one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FaultPlan {
    pub latency_ms: u64,
    pub terminal: Option<FaultEffect>,
}

/// Rules plus how many uses each has left.
#[derive(Debug, Clone, Default)]
pub(crate) struct FaultEngine {
    config: FaultConfig,
    remaining: Vec<Option<u32>>,
}

impl FaultEngine {
    pub fn new(config: FaultConfig) -> Self {
        let remaining = config.rules.iter().map(|r| r.times).collect();
        FaultEngine { config, remaining }
    }

    pub fn config(&self) -> &FaultConfig {
        &self.config
    }

    pub fn plan(&mut self, rng: &mut StdRng, ctx: FaultContext<'_>) -> FaultPlan {
        let mut plan = FaultPlan::default();
        for (rule, remaining) in self.config.rules.iter().zip(self.remaining.iter_mut()) {
            if *remaining == Some(0) || !matches(rule, ctx) {
                continue;
            }
            // Certain and impossible rules draw nothing, so adding one does
            // not shift the random sequence seen by the probabilistic ones.
            let hit = if rule.probability >= 1.0 {
                true
            } else if rule.probability <= 0.0 {
                false
            } else {
                rng.gen::<f64>() < rule.probability
            };
            if !hit {
                continue;
            }
            if let Some(n) = remaining.as_mut() {
                *n -= 1;
            }
            match &rule.effect {
                FaultEffect::Latency { ms } => plan.latency_ms += ms,
                terminal => {
                    plan.terminal = Some(terminal.clone());
                    break;
                }
            }
        }
        plan
    }
}

fn matches(rule: &FaultRule, ctx: FaultContext<'_>) -> bool {
    fn contains(needle: &Option<String>, hay: Option<&str>) -> bool {
        match needle {
            None => true,
            Some(n) => hay.is_some_and(|h| h.contains(n.as_str())),
        }
    }
    rule.route.matches(ctx.route)
        && rule.effect.applies_to(ctx.route)
        && contains(&rule.account_number_contains, ctx.account_number)
        && contains(&rule.reference_contains, ctx.reference)
        && rule.idempotency_key.as_deref().is_none_or(|k| ctx.idempotency_key == Some(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn ctx(route: Route) -> FaultContext<'static> {
        FaultContext { route, idempotency_key: Some("k1"), reference: Some("wd-1"), account_number: Some("000123") }
    }

    #[test]
    fn latency_composes_with_first_terminal_and_times_is_spent() {
        let mut engine = FaultEngine::new(FaultConfig {
            rules: vec![
                FaultRule::new(RouteMatch::Any, FaultEffect::Latency { ms: 5 }),
                FaultRule { times: Some(1), ..FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount) },
                FaultRule::new(RouteMatch::Create, FaultEffect::ResetAfterCommit),
            ],
        });
        let mut rng = StdRng::seed_from_u64(1);
        let first = engine.plan(&mut rng, ctx(Route::Create));
        assert_eq!(first.latency_ms, 5);
        assert_eq!(first.terminal, Some(FaultEffect::InvalidAccount));
        let second = engine.plan(&mut rng, ctx(Route::Create));
        assert_eq!(second.terminal, Some(FaultEffect::ResetAfterCommit));
        // invalid_account never applies to lookups.
        let lookup = engine.plan(&mut rng, ctx(Route::Lookup));
        assert_eq!(lookup.terminal, None);
    }

    #[test]
    fn conditions_must_all_match() {
        let rule = FaultRule {
            account_number_contains: Some("123".into()),
            reference_contains: Some("nope".into()),
            ..FaultRule::new(RouteMatch::Any, FaultEffect::InvalidAccount)
        };
        let mut engine = FaultEngine::new(FaultConfig { rules: vec![rule] });
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(engine.plan(&mut rng, ctx(Route::Create)).terminal, None);
    }

    #[test]
    fn scenario_json_round_trips() {
        let json = r#"{"rules":[{"route":"create","times":3,
            "effect":{"type":"status","code":503,"retry_after_secs":2}},
            {"route":"lookup","effect":{"type":"timeout_before_commit"}}]}"#;
        let config: FaultConfig = serde_json::from_str(json).unwrap();
        assert_eq!(config.rules[0].probability, 1.0);
        assert_eq!(config.rules[1].effect, FaultEffect::TimeoutBeforeCommit { ms: 30_000 });
        let again: FaultConfig = serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
        assert_eq!(again, config);
    }
}
