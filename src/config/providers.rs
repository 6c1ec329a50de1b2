//! Several payout providers (SPEC §16): the `PROVIDERS` file (JSON or TOML, by its extension)
//! parsed into typed settings and validated before anything starts ([`Providers::load`]), the
//! lone `PROVIDER_URL` as the one provider named `default` ([`Providers::single`]), and routing by
//! currency, then priority ([`Providers::route`]). Every refusal is one line naming the file's
//! fault; credentials are read from the environment variables the file names, never from the
//! file itself.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use secrecy::SecretString;
use serde::Deserialize;

use super::{BreakerConfig, SlidingWindow};
use crate::domain::{AmountLimits, Currency};

/// The name of the one provider a lone `PROVIDER_URL` configures.
pub const DEFAULT_PROVIDER: &str = "default";

/// The file as written (SPEC §16). Unknown keys are refused, so a typo cannot fall back to a
/// default silently.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    providers: Vec<Entry>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    url: String,
    currencies: Vec<String>,
    priority: u32,
    #[serde(default)]
    api_key_env: Option<String>,
    #[serde(default)]
    breaker: Option<BreakerEntry>,
    #[serde(default)]
    webhook_secrets_env: Option<String>,
    #[serde(default)]
    settlement: Option<SettlementEntry>,
    #[serde(default)]
    retry: Option<RetryOverrides>,
}

/// A provider's retry policy for payouts, as far as the file changes the single-provider one
/// (`SUBMIT_*`): each key absent keeps that setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryOverrides {
    pub base_delay_ms: Option<u64>,
    pub max_delay_ms: Option<u64>,
    pub max_attempts: Option<u32>,
    pub max_elapsed_ms: Option<u64>,
    pub max_retry_after_ms: Option<u64>,
}

impl RetryOverrides {
    /// `base` with these changes, checked as any retry policy is.
    pub fn over(&self, base: &super::RetryPolicy) -> Result<super::RetryPolicy, String> {
        let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
        let policy = super::RetryPolicy {
            base_delay: ms(self.base_delay_ms, base.base_delay),
            max_delay: ms(self.max_delay_ms, base.max_delay),
            max_attempts: self.max_attempts.unwrap_or(base.max_attempts),
            max_elapsed: ms(self.max_elapsed_ms, base.max_elapsed),
            max_retry_after: ms(self.max_retry_after_ms, base.max_retry_after),
        };
        policy.validate().map_err(|e| format!("retry: {e}"))?;
        Ok(policy)
    }
}

/// A provider's breaker, in the file's terms: a failure ratio over a time window, the calls it
/// needs before judging, and how long it stays open.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct BreakerEntry {
    failure_rate: f64,
    window_s: u64,
    min_calls: u32,
    open_s: u64,
}

/// Whether the provider's daily settlement report is imported, and from which hour (UTC).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettlementEntry {
    #[serde(default = "yes")]
    daily_import: bool,
    #[serde(default)]
    import_hour: Option<u32>,
}

fn yes() -> bool {
    true
}

/// Which currencies a provider pays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Currencies {
    /// The lone `PROVIDER_URL` provider pays whatever the limits allow.
    Any,
    Only(BTreeSet<&'static str>),
}

/// One provider, validated.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// `[a-z0-9_-]{1,32}`, unique: the label of its breaker, metrics and routes.
    pub name: String,
    pub url: reqwest::Url,
    pub currencies: Currencies,
    /// Lower is tried first.
    pub priority: u32,
    /// From the variable `api_key_env` names (for the lone provider, `PROVIDER_API_KEY`).
    pub api_key: Option<SecretString>,
    /// Its own breaker; `None` takes the single-provider settings.
    pub breaker: Option<BreakerConfig>,
    /// Its webhook secrets, from the variable `webhook_secrets_env` names.
    pub webhook_secrets: Vec<SecretString>,
    /// `Some((daily_import, hour))` when the file says; `None` takes the single-provider settings.
    pub settlement: Option<(bool, Option<u32>)>,
    /// Its payout retry policy's changes to the single-provider one (`None`: that one).
    pub retry: Option<RetryOverrides>,
}

impl ProviderSettings {
    /// Whether it pays `currency`.
    pub fn pays(&self, currency: Currency) -> bool {
        self.currencies.pays_code(currency.code())
    }
}

impl Currencies {
    /// Whether the currency with ISO code `code` is among them.
    pub fn pays_code(&self, code: &str) -> bool {
        match self {
            Currencies::Any => true,
            Currencies::Only(codes) => codes.contains(code),
        }
    }
}

/// Every configured provider, validated, by priority.
#[derive(Debug, Clone)]
pub struct Providers {
    list: Vec<ProviderSettings>,
}

/// How the providers are configured, as the process's settings give them.
pub struct Sources<'a> {
    /// `PROVIDERS`: a path to a `.json` or `.toml` file.
    pub file: Option<&'a std::path::Path>,
    /// `PROVIDER_URL` and `PROVIDER_API_KEY`: the one-provider case.
    pub url: Option<&'a str>,
    pub api_key: Option<&'a str>,
    /// The environment the file's `*_env` names are read from.
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

/// What the configuration came to: providers (with warnings worth a log line), or none (sandbox
/// mode, as before).
pub struct Loaded {
    pub providers: Option<Providers>,
    pub warnings: Vec<String>,
}

fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

impl Providers {
    /// Reads and checks the configuration: refused (one line) when both `PROVIDERS` and
    /// `PROVIDER_URL` are set, when the file does not read or breaks a rule; warns when a currency
    /// `limits` names has no provider.
    pub fn load(sources: &Sources<'_>, limits: &AmountLimits) -> Result<Loaded, String> {
        let providers = match (sources.file, sources.url) {
            (Some(_), Some(_)) => {
                return Err("PROVIDERS and PROVIDER_URL are both set: configure providers in one place".into())
            }
            (None, None) => return Ok(Loaded { providers: None, warnings: Vec::new() }),
            (None, Some(url)) => Providers::single(url, sources.api_key)?,
            (Some(path), None) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("PROVIDERS: cannot read {}: {e}", path.display()))?;
                let toml = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("toml"));
                Providers::parse(&text, toml, sources.env)
                    .map_err(|e| format!("PROVIDERS ({}): {e}", path.display()))?
            }
        };
        let warnings = providers.uncovered(limits);
        Ok(Loaded { providers: Some(providers), warnings })
    }

    /// The one provider a lone `PROVIDER_URL` configures: `default`, paying any currency.
    pub fn single(url: &str, api_key: Option<&str>) -> Result<Providers, String> {
        let url = parse_url(url).map_err(|e| format!("PROVIDER_URL: {e}"))?;
        Ok(Providers {
            list: vec![ProviderSettings {
                name: DEFAULT_PROVIDER.to_owned(),
                url,
                currencies: Currencies::Any,
                priority: 1,
                api_key: api_key.map(|k| SecretString::from(k.to_owned())),
                breaker: None,
                webhook_secrets: Vec::new(),
                settlement: None,
                retry: None,
            }],
        })
    }

    /// Parses and validates a providers file's text (`toml` or JSON).
    pub fn parse(text: &str, toml: bool, env: &dyn Fn(&str) -> Option<String>) -> Result<Providers, String> {
        let file: File = match toml {
            true => ::toml::from_str(text).map_err(|e| one_line(&e.to_string()))?,
            false => serde_json::from_str(text).map_err(|e| e.to_string())?,
        };
        if file.providers.is_empty() {
            return Err("no provider is configured".into());
        }
        let mut list = Vec::new();
        let mut names = BTreeSet::new();
        for entry in file.providers {
            let name = entry.name.clone();
            if !valid_name(&name) {
                return Err(format!("provider name `{name}` is not [a-z0-9_-]{{1,32}}"));
            }
            if !names.insert(name.clone()) {
                return Err(format!("provider `{name}` is configured twice"));
            }
            list.push(entry.validate(env).map_err(|e| format!("provider `{name}`: {e}"))?);
        }
        // Two providers of one currency at one priority would make the order a coin toss.
        let mut by_rank: BTreeMap<(&str, u32), &str> = BTreeMap::new();
        for p in &list {
            if let Currencies::Only(codes) = &p.currencies {
                for code in codes {
                    if let Some(other) = by_rank.insert((code, p.priority), &p.name) {
                        return Err(format!(
                            "providers `{other}` and `{}` both pay {code} at priority {}",
                            p.name, p.priority
                        ));
                    }
                }
            }
        }
        list.sort_by(|a, b| a.priority.cmp(&b.priority).then_with(|| a.name.cmp(&b.name)));
        Ok(Providers { list })
    }

    /// The currencies the limits name that no provider pays: a warning each (such a withdrawal
    /// would be accepted and then wait for a provider).
    fn uncovered(&self, limits: &AmountLimits) -> Vec<String> {
        let mut named: Vec<&str> = limits.per_currency.keys().copied().collect();
        named.sort_unstable();
        named
            .into_iter()
            .filter_map(|code| Currency::parse(code).ok())
            .filter(|c| self.route(*c).is_empty())
            .map(|c| format!("WITHDRAWAL_LIMITS allows {} but no provider pays it", c.code()))
            .collect()
    }

    /// The providers that pay `currency`, first choice first.
    pub fn route(&self, currency: Currency) -> Vec<&ProviderSettings> {
        self.list.iter().filter(|p| p.pays(currency)).collect()
    }

    /// Every provider, by priority.
    pub fn all(&self) -> &[ProviderSettings] {
        &self.list
    }

    /// The provider named `name`.
    pub fn get(&self, name: &str) -> Option<&ProviderSettings> {
        self.list.iter().find(|p| p.name == name)
    }
}

impl Entry {
    fn validate(self, env: &dyn Fn(&str) -> Option<String>) -> Result<ProviderSettings, String> {
        let url = parse_url(&self.url)?;
        if self.currencies.is_empty() {
            return Err("no currency".into());
        }
        let mut codes = BTreeSet::new();
        for code in &self.currencies {
            let currency = Currency::parse(code).map_err(|_| format!("unknown currency `{code}`"))?;
            codes.insert(currency.code());
        }
        let variable = |name: &Option<String>, what: &str| -> Result<Option<String>, String> {
            match name {
                None => Ok(None),
                Some(var) => env(var)
                    .filter(|v| !v.trim().is_empty())
                    .map(Some)
                    .ok_or_else(|| format!("its {what} variable {var} is not set")),
            }
        };
        let api_key = variable(&self.api_key_env, "credential")?.map(SecretString::from);
        let webhook_secrets = variable(&self.webhook_secrets_env, "webhook secrets")?
            .map(|list| super::WebhookSettings::secrets_from(&list))
            .unwrap_or_default();
        let breaker = self.breaker.map(BreakerEntry::config).transpose()?;
        if let Some(retry) = &self.retry {
            // Checked against the defaults here; against the process's own settings at start.
            retry.over(&super::RetryPolicy::payout_submit())?;
        }
        let settlement = match self.settlement {
            Some(SettlementEntry { import_hour: Some(hour), .. }) if hour > 23 => {
                return Err(format!("settlement import_hour {hour} is not 0 to 23"))
            }
            Some(s) => Some((s.daily_import, s.import_hour)),
            None => None,
        };
        Ok(ProviderSettings {
            name: self.name,
            url,
            currencies: Currencies::Only(codes),
            priority: self.priority,
            api_key,
            breaker,
            webhook_secrets,
            settlement,
            retry: self.retry,
        })
    }
}

impl BreakerEntry {
    fn config(self) -> Result<BreakerConfig, String> {
        if !(self.failure_rate > 0.0 && self.failure_rate <= 1.0) {
            return Err(format!("breaker failure_rate {} is not in (0, 1]", self.failure_rate));
        }
        let config = BreakerConfig {
            window: SlidingWindow::Time { duration: Duration::from_secs(self.window_s) },
            failure_rate_threshold: self.failure_rate * 100.0,
            minimum_number_of_calls: self.min_calls,
            wait_duration_in_open: Duration::from_secs(self.open_s),
            ..BreakerConfig::default()
        };
        config.validate().map_err(|e| format!("breaker: {e}"))?;
        Ok(config)
    }
}

fn parse_url(url: &str) -> Result<reqwest::Url, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("url `{url}`: {e}"))?;
    match parsed.scheme() {
        "http" | "https" if parsed.host().is_some() => Ok(parsed),
        _ => Err(format!("url `{url}` is not http(s)://host")),
    }
}

/// A parser's message on one line.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    const TWO: &str = r#"{"providers": [
      {"name": "acme", "url": "https://payouts.acme.example", "currencies": ["USD", "EUR"],
       "priority": 1, "api_key_env": "ACME_API_KEY",
       "breaker": {"failure_rate": 0.5, "window_s": 60, "min_calls": 20, "open_s": 30},
       "webhook_secrets_env": "ACME_WEBHOOK_SECRETS"},
      {"name": "bolt", "url": "https://api.bolt.example", "currencies": ["USD"], "priority": 2}
    ]}"#;

    fn env(name: &str) -> Option<String> {
        match name {
            "ACME_API_KEY" => Some("acme-key".into()),
            "ACME_WEBHOOK_SECRETS" => Some("whsec_a, whsec_b".into()),
            _ => None,
        }
    }

    fn usd() -> Currency {
        Currency::parse("USD").unwrap()
    }

    #[test]
    fn the_specs_example_reads_and_routes_by_currency_then_priority() {
        let providers = Providers::parse(TWO, false, &env).unwrap();
        let names = |c: &str| -> Vec<String> {
            providers.route(Currency::parse(c).unwrap()).iter().map(|p| p.name.clone()).collect()
        };
        assert_eq!(names("USD"), ["acme", "bolt"]);
        assert_eq!(names("EUR"), ["acme"]);
        assert!(names("JPY").is_empty());
        let acme = providers.get("acme").unwrap();
        assert_eq!(acme.api_key.as_ref().unwrap().expose_secret(), "acme-key");
        assert_eq!(acme.webhook_secrets.len(), 2);
        let breaker = acme.breaker.as_ref().unwrap();
        assert_eq!(breaker.failure_rate_threshold, 50.0);
        assert_eq!(breaker.minimum_number_of_calls, 20);
        assert_eq!(breaker.wait_duration_in_open, Duration::from_secs(30));
        assert_eq!(breaker.window, SlidingWindow::Time { duration: Duration::from_secs(60) });
        let bolt = providers.get("bolt").unwrap();
        assert!(bolt.api_key.is_none() && bolt.breaker.is_none() && bolt.webhook_secrets.is_empty());
        assert!(!format!("{providers:?}").contains("acme-key"), "credentials never print");
    }

    /// A provider's retry keys change only themselves; a policy that breaks the rules is refused.
    #[test]
    fn a_providers_retry_keys_change_only_what_they_name() {
        let file = |retry: &str| {
            format!(
                r#"{{"providers": [{{"name": "acme", "url": "https://a.example", "currencies": ["USD"],
                    "priority": 1, "retry": {retry}}}]}}"#
            )
        };
        let providers = Providers::parse(&file(r#"{"max_attempts": 2, "base_delay_ms": 5}"#), false, &env).unwrap();
        let retry = providers.get("acme").unwrap().retry.unwrap();
        let base = crate::config::RetryPolicy::payout_submit();
        let policy = retry.over(&base).unwrap();
        assert_eq!((policy.max_attempts, policy.base_delay), (2, Duration::from_millis(5)));
        assert_eq!((policy.max_delay, policy.max_elapsed), (base.max_delay, base.max_elapsed));
        let refused = Providers::parse(&file(r#"{"max_attempts": 0}"#), false, &env).unwrap_err();
        assert!(refused.starts_with("provider `acme`: retry: "), "{refused}");
        let unknown = Providers::parse(&file(r#"{"tries": 3}"#), false, &env).unwrap_err();
        assert!(unknown.contains("tries"), "{unknown}");
    }

    #[test]
    fn toml_reads_the_same_keys() {
        let toml = r#"
            [[providers]]
            name = "bolt"
            url = "https://api.bolt.example"
            currencies = ["USD"]
            priority = 2

            [[providers]]
            name = "acme"
            url = "https://payouts.acme.example"
            currencies = ["USD", "EUR"]
            priority = 1
            api_key_env = "ACME_API_KEY"
            settlement = { daily_import = true, import_hour = 7 }
        "#;
        let providers = Providers::parse(toml, true, &env).unwrap();
        let order: Vec<&str> = providers.all().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(order, ["acme", "bolt"], "by priority, whatever the file's order");
        assert_eq!(providers.get("acme").unwrap().settlement, Some((true, Some(7))));
    }

    #[test]
    fn each_refused_configuration_says_why_in_one_line() {
        let entry = |name: &str, currencies: &str, priority: u32, extra: &str| {
            format!(
                r#"{{"name": "{name}", "url": "https://p.example", "currencies": {currencies}, "priority": {priority}{extra}}}"#
            )
        };
        let file = |entries: &[String]| format!(r#"{{"providers": [{}]}}"#, entries.join(","));
        let cases: Vec<(String, &str)> = vec![
            (
                file(&[entry("acme", r#"["USD"]"#, 1, ""), entry("acme", r#"["EUR"]"#, 2, "")]),
                "provider `acme` is configured twice",
            ),
            (file(&[entry("acme", r#"["USD", "XXX"]"#, 1, "")]), "provider `acme`: unknown currency `XXX`"),
            (
                file(&[entry("acme", r#"["USD"]"#, 1, r#", "api_key_env": "MISSING_KEY""#)]),
                "provider `acme`: its credential variable MISSING_KEY is not set",
            ),
            (
                file(&[entry("acme", r#"["USD"]"#, 1, r#", "webhook_secrets_env": "MISSING_SECRETS""#)]),
                "provider `acme`: its webhook secrets variable MISSING_SECRETS is not set",
            ),
            (file(&[entry("Acme!", r#"["USD"]"#, 1, "")]), "provider name `Acme!` is not [a-z0-9_-]{1,32}"),
            (
                file(&[entry("acme", r#"["USD"]"#, 1, ""), entry("bolt", r#"["USD"]"#, 1, "")]),
                "providers `acme` and `bolt` both pay USD at priority 1",
            ),
            (file(&[entry("acme", "[]", 1, "")]), "provider `acme`: no currency"),
            (file(&[]), "no provider is configured"),
            (
                file(&[entry(
                    "acme",
                    r#"["USD"]"#,
                    1,
                    r#", "breaker": {"failure_rate": 1.5, "window_s": 60, "min_calls": 5, "open_s": 30}"#,
                )]),
                "provider `acme`: breaker failure_rate 1.5 is not in (0, 1]",
            ),
            (file(&[entry("acme", r#"["USD"]"#, 1, r#", "priorty": 2"#)]), "unknown field `priorty`"),
        ];
        for (text, expected) in cases {
            let refused = Providers::parse(&text, false, &env).unwrap_err();
            assert!(refused.contains(expected), "{refused:?} should say {expected:?}");
            assert!(!refused.contains('\n'), "one line: {refused:?}");
        }
        let bad_url = r#"{"providers": [{"name": "a", "url": "ftp://x", "currencies": ["USD"], "priority": 1}]}"#;
        assert!(Providers::parse(bad_url, false, &env).unwrap_err().contains("is not http(s)://host"));
        let bad_toml = Providers::parse("[[providers]]\nname = 1", true, &env).unwrap_err();
        assert!(!bad_toml.contains('\n'), "{bad_toml:?}");
    }

    #[test]
    fn a_lone_url_is_the_default_provider_and_both_together_are_refused() {
        let no_env = |_: &str| None;
        let limits = AmountLimits::parse("USD=100,JPY=10000", rust_decimal::Decimal::from(1_000)).unwrap();
        let single = Sources { file: None, url: Some("http://127.0.0.1:9000"), api_key: Some("k"), env: &no_env };
        let loaded = Providers::load(&single, &limits).unwrap();
        let providers = loaded.providers.unwrap();
        assert_eq!(providers.route(usd()).iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), [DEFAULT_PROVIDER]);
        assert!(loaded.warnings.is_empty(), "the default provider pays every currency");

        let sandbox = Sources { file: None, url: None, api_key: None, env: &no_env };
        assert!(Providers::load(&sandbox, &limits).unwrap().providers.is_none(), "neither: sandbox mode");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("providers.json");
        std::fs::write(&path, TWO).unwrap();
        let both = Sources { file: Some(&path), url: Some("http://127.0.0.1:9000"), api_key: None, env: &env };
        let refused = Providers::load(&both, &limits).err().unwrap();
        assert_eq!(refused, "PROVIDERS and PROVIDER_URL are both set: configure providers in one place");

        let from_file = Sources { file: Some(&path), url: None, api_key: None, env: &env };
        let loaded = Providers::load(&from_file, &limits).unwrap();
        assert_eq!(loaded.warnings, ["WITHDRAWAL_LIMITS allows JPY but no provider pays it"]);
        let missing = Sources { file: Some(&dir.path().join("nope.json")), url: None, api_key: None, env: &env };
        assert!(Providers::load(&missing, &limits).err().unwrap().starts_with("PROVIDERS: cannot read"));
    }
}
