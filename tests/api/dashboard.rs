//! The Grafana dashboard (issue 33): `runbooks/dashboards/withdrawals.json` is the current Grafana
//! JSON model, read here as the file an operator imports. Grafana does not run in this suite, so
//! the model is the proof: it parses, every panel reads the `${datasource}` variable, every panel
//! expression passes `promtool check rules`, every metric a panel reads is in the catalogue and on
//! a fresh process's `/metrics`, every catalogue family has a panel, and every runbook page's
//! "Metrics to look at" names a panel by its exact title.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

use crate::both_backends;
use crate::harness::TestApp;
use crate::runbooks::{family, find_word, metric_names, pages, runbooks_dir};

both_backends!(every_metric_a_panel_reads_is_on_a_fresh_process_metrics_before_any_traffic);

/// The datasource every panel and every query names: the dashboard's `datasource` variable.
const DATASOURCE: &str = "${datasource}";

/// The Grafana interval variable the rate windows use, and the window promtool reads instead.
const RATE_INTERVAL: (&str, &str) = ("$__rate_interval", "5m");

/// The panel types the dashboard uses: a panel of another type is a mistake here.
const PANEL_TYPES: [&str; 3] = ["timeseries", "stat", "state-timeline"];

/// The panel titles other parts of issue 33 name (the API alerts' runbook pages).
const API_PANELS: [&str; 4] =
    ["API request rate by route", "API 5xx ratio", "API latency p99 by route", "Create latency p50/p99"];

fn dashboard() -> Value {
    let text = std::fs::read_to_string(runbooks_dir().join("dashboards/withdrawals.json")).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("runbooks/dashboards/withdrawals.json does not parse: {e}"))
}

/// One panel with queries: its title, type, datasource and `(refId, expr)` of each target.
#[derive(Debug)]
struct Panel {
    id: u64,
    title: String,
    kind: String,
    panel: Value,
    exprs: Vec<(String, String)>,
}

/// Every panel but the rows, the panels of collapsed rows included.
fn panels(dashboard: &Value) -> Vec<Panel> {
    let mut flat = Vec::new();
    for panel in dashboard["panels"].as_array().expect("a panels list") {
        flat.push(panel.clone());
        if let Some(inner) = panel["panels"].as_array() {
            flat.extend(inner.iter().cloned());
        }
    }
    flat.into_iter()
        .filter(|p| p["type"] != "row")
        .map(|panel| Panel {
            id: panel["id"].as_u64().unwrap_or_else(|| panic!("a panel without a numeric id: {panel}")),
            title: panel["title"].as_str().unwrap_or_default().to_owned(),
            kind: panel["type"].as_str().unwrap_or_default().to_owned(),
            exprs: panel["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    (
                        t["refId"].as_str().unwrap_or_default().to_owned(),
                        t["expr"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect(),
            panel,
        })
        .collect()
}

/// Every title of the dashboard, the rows' included.
fn all_titles(dashboard: &Value) -> Vec<String> {
    let top = dashboard["panels"].as_array().unwrap();
    top.iter()
        .chain(top.iter().filter_map(|p| p["panels"].as_array()).flatten())
        .map(|p| p["title"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn the_dashboard_parses_and_every_panel_reads_the_datasource_variable() {
    let dashboard = dashboard();
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36), "the current JSON model");
    assert!(
        dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "a stable uid, so an import replaces the last one"
    );

    // The datasource is a variable of type `datasource` over Prometheus datasources.
    let variables = dashboard["templating"]["list"].as_array().expect("templating.list");
    let datasource = variables.iter().find(|v| v["name"] == "datasource").expect("a `datasource` variable");
    assert_eq!(datasource["type"], "datasource", "{datasource}");
    assert_eq!(datasource["query"], "prometheus", "{datasource}");

    let panels = panels(&dashboard);
    assert!(panels.len() >= 30, "{} panels", panels.len());
    for panel in &panels {
        let title = &panel.title;
        assert!(!title.is_empty(), "a panel without a title: {}", panel.panel);
        assert!(PANEL_TYPES.contains(&panel.kind.as_str()), "{title}: type {}", panel.kind);
        assert_eq!(panel.panel["datasource"]["type"], "prometheus", "{title}");
        assert_eq!(panel.panel["datasource"]["uid"], DATASOURCE, "{title}: reads the datasource variable");
        let targets = panel.panel["targets"].as_array().unwrap_or_else(|| panic!("{title}: no targets"));
        assert!(!targets.is_empty(), "{title}: no targets");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], DATASOURCE, "{title}: a query on another datasource: {target}");
            assert!(target["expr"].as_str().is_some_and(|e| !e.trim().is_empty()), "{title}: an empty query");
        }
        let refs: BTreeSet<&str> = panel.exprs.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(refs.len(), panel.exprs.len(), "{title}: every query its own refId");
        let grid = &panel.panel["gridPos"];
        let (x, w, h) = (grid["x"].as_u64(), grid["w"].as_u64(), grid["h"].as_u64());
        assert!(
            x.zip(w).is_some_and(|(x, w)| w > 0 && x + w <= 24) && h.is_some_and(|h| h > 0) && grid["y"].is_u64(),
            "{title}: gridPos {grid} is not on Grafana's 24-column grid"
        );
    }

    // Unique titles (the runbooks name panels by title) and ids, rows included.
    let titles = all_titles(&dashboard);
    let unique: BTreeSet<&String> = titles.iter().collect();
    assert_eq!(unique.len(), titles.len(), "titles used twice: {titles:?}");
    let top = dashboard["panels"].as_array().unwrap();
    let ids: Vec<u64> = top.iter().filter_map(|p| p["id"].as_u64()).collect();
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), top.len(), "every panel its own id");

    // No two panels overlap on the grid.
    let boxes: Vec<(&str, [u64; 4])> = top
        .iter()
        .map(|p| {
            let g = &p["gridPos"];
            let n = |k: &str| g[k].as_u64().unwrap_or_else(|| panic!("{}: gridPos.{k}", p["title"]));
            (p["title"].as_str().unwrap_or_default(), [n("x"), n("y"), n("w"), n("h")])
        })
        .collect();
    for (i, (a, [ax, ay, aw, ah])) in boxes.iter().enumerate() {
        for (b, [bx, by, bw, bh]) in &boxes[i + 1..] {
            let apart = ax + aw <= *bx || bx + bw <= *ax || ay + ah <= *by || by + bh <= *ay;
            assert!(apart, "`{a}` and `{b}` overlap");
        }
    }

    // The titles the API alerts' runbook pages name, exactly.
    for title in API_PANELS {
        assert!(titles.iter().any(|t| t == title), "no panel titled `{title}`");
    }
    // The breaker is a state timeline whose values read as the breaker's states.
    let breaker = panels
        .iter()
        .find(|p| p.exprs.iter().any(|(_, e)| metric_names(e).iter().any(|n| n == "circuit_breaker_state")))
        .expect("a panel reads circuit_breaker_state");
    assert_eq!(breaker.kind, "state-timeline", "{}", breaker.title);
    let mappings = &breaker.panel["fieldConfig"]["defaults"]["mappings"];
    let text = |value: &str| {
        mappings.as_array().into_iter().flatten().find_map(|m| m["options"][value]["text"].as_str()).map(str::to_owned)
    };
    assert_eq!(
        [text("0"), text("1"), text("2")],
        [Some("closed".to_owned()), Some("half-open".to_owned()), Some("open".to_owned())],
        "the breaker's value mappings: {mappings}"
    );
}

/// Each expression as promtool reads it: Grafana's rate window replaced by a fixed one; no other
/// variable may be left (promtool would refuse it, and Grafana would not fill it in).
fn promql(expr: &str) -> String {
    let expr = expr.replace(RATE_INTERVAL.0, RATE_INTERVAL.1);
    assert!(!expr.contains('$'), "a Grafana variable promtool cannot read in `{expr}`");
    expr
}

/// `promtool check rules` on a rules file with each `(record, expr)` as a recording rule. Panics
/// when promtool is missing: `scripts/test` installs it, and a skipped check proves nothing.
fn promtool_check(rules: &[(String, String)]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dashboard.rules.yml");
    let mut file = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (record, expr) in rules {
        // A JSON string is a YAML double-quoted scalar.
        file.push_str(&format!("      - record: {record}\n        expr: {}\n", serde_json::to_string(expr).unwrap()));
    }
    std::fs::write(&path, file).unwrap();
    Command::new("promtool").arg("check").arg("rules").arg(&path).output().unwrap_or_else(|e| {
        panic!("promtool cannot run ({e}): install it (Debian package prometheus); scripts/test does")
    })
}

#[test]
fn every_panel_expression_passes_promtool() {
    let panels = panels(&dashboard());
    let rules: Vec<(String, String)> = panels
        .iter()
        .flat_map(|p| p.exprs.iter().map(move |(r, e)| (format!("dashboard_panel_{}_{r}", p.id), promql(e))))
        .collect();
    assert!(rules.len() >= panels.len(), "{rules:?}");
    let checked = promtool_check(&rules);
    let (stdout, stderr) = (String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));
    assert!(checked.status.success(), "promtool refused a panel's expression:\n{stdout}\n{stderr}");
    assert!(stdout.contains(&format!("SUCCESS: {} rules found", rules.len())), "{stdout}");

    // The check is real: one unbalanced expression is refused.
    let broken = [("dashboard_broken".to_owned(), "sum(rate(dead_letters_total[5m])".to_owned())];
    assert!(!promtool_check(&broken).status.success(), "promtool took an unbalanced expression");
}

/// Every `(panel title, series name)` the dashboard reads.
fn series_read(panels: &[Panel]) -> Vec<(String, String)> {
    let mut read = Vec::new();
    for panel in panels {
        for (_, expr) in &panel.exprs {
            let names = metric_names(expr);
            assert!(!names.is_empty(), "{}: no metric found in `{expr}`", panel.title);
            read.extend(names.into_iter().map(|n| (panel.title.clone(), n)));
        }
    }
    read
}

#[test]
fn every_metric_a_panel_reads_is_in_the_catalogue_and_every_family_has_a_panel() {
    let panels = panels(&dashboard());
    let read = series_read(&panels);
    let unknown: Vec<String> =
        read.iter().filter(|(_, n)| family(n).is_none()).map(|(title, n)| format!("{title}: {n}")).collect();
    assert!(unknown.is_empty(), "metrics the dashboard reads that we do not export:\n{}", unknown.join("\n"));

    // A panel per SPEC §9 family: every family of the catalogue is read by one.
    let covered: BTreeSet<&str> = read.iter().filter_map(|(_, n)| family(n)).collect();
    let without: Vec<&str> =
        withdrawals::metrics::CATALOGUE.iter().map(|(n, _, _)| *n).filter(|n| !covered.contains(n)).collect();
    assert!(without.is_empty(), "catalogue families no panel reads: {without:?}");

    // The extraction itself, on the shapes the panels use.
    assert_eq!(
        metric_names(
            "histogram_quantile(0.99, sum by (route, le) (rate(http_request_duration_seconds_bucket{route=\"/v1/x\"}[$__rate_interval])))"
        ),
        ["http_request_duration_seconds_bucket"]
    );
    assert_eq!(
        metric_names("sum(increase(a_total{q=\"p\"}[30m])) / clamp_min(sum(increase(b_total[30m])), 1e-9)"),
        ["a_total", "b_total"]
    );
    assert_eq!(metric_names("time() - max by (provider) (c_seconds > 0)"), ["c_seconds"]);
    assert_eq!(family("provider_request_duration_seconds_bucket"), Some("provider_request_duration_seconds"));
    assert_eq!(family("dead_letters_total_count"), None, "only a histogram has a _count");
}

/// The `label="value"` matchers of each selector of `name` in `expr` (the `=` ones: a regex or a
/// negative matcher is no series of its own).
fn equality_matchers(expr: &str, name: &str) -> Vec<Vec<String>> {
    let mut selectors = Vec::new();
    let mut rest = expr;
    while let Some(at) = find_word(rest, name) {
        let after = &rest[at + name.len()..];
        if let Some(inner) = after.strip_prefix('{') {
            let end = inner.find('}').expect("a closed selector");
            let matchers = inner[..end]
                .split(',')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .filter(|m| {
                    m.split_once('=').is_some_and(|(label, value)| !label.ends_with('!') && !value.starts_with('~'))
                })
                .map(str::to_owned)
                .collect();
            selectors.push(matchers);
        } else {
            selectors.push(Vec::new());
        }
        rest = after;
    }
    selectors
}

/// SPEC §9 and issue 33: a panel never reads "no data" on a process that has seen no traffic.
/// A real `withdrawals serve` (its own recorder: no other test writes it) with two providers
/// sharing USD, read before any request (the scrapes go to `--metrics-bind`, which counts none):
/// every series name a panel reads is on `/metrics`, with the label values its selectors ask for.
/// No family is let off: with two providers sharing a currency even `payout_failovers_total`
/// exists from zero (a one-provider process has none, and its panel shows no data there: there is
/// no move to show).
async fn every_metric_a_panel_reads_is_on_a_fresh_process_metrics_before_any_traffic(app: TestApp) {
    let dir = tempfile::tempdir().unwrap();
    let mock = app.provider.mock.url();
    let providers = dir.path().join("providers.json");
    let provider = |name: &str, priority: u32| {
        format!(
            r#"{{"name": "{name}", "url": "{mock}", "currencies": ["USD"], "priority": {priority}, "api_key_env": "PROVIDER_KEY"}}"#
        )
    };
    std::fs::write(&providers, format!(r#"{{"providers": [{}, {}]}}"#, provider("acme", 1), provider("bolt", 2)))
        .unwrap();
    let serve = app.serve_process(&[("PROVIDERS", providers.to_str().unwrap()), ("PROVIDER_KEY", "test-provider-key")]);
    let metrics_port = serve.metrics_port;
    let client = app.client.clone();
    let metrics_url = format!("http://127.0.0.1:{metrics_port}/metrics");
    // Once the first database refresh has run (its gauges read a database with no rows) and the
    // API's router is built (its routes' series start there): both happen at start, in either
    // order, before the first request can be served. No request is sent to the API port.
    app.eventually("a fresh process's /metrics", std::time::Duration::from_secs(30), || {
        let (client, url) = (client.clone(), metrics_url.clone());
        async move {
            let text = client.get(url).send().await.ok()?.text().await.ok()?;
            let router_built = text.lines().any(|l| l.starts_with("http_request_duration_seconds_bucket{"));
            (text.contains("ledger_invariant_violations 0") && router_built).then_some(())
        }
    })
    .await;
    // A scrape renders family by family while start-up may still register: one that saw the
    // refresh began after what start-up registers before it, so read again.
    let text = client.get(&metrics_url).send().await.unwrap().text().await.unwrap();
    drop(serve);

    let panels = panels(&dashboard());
    let (mut missing, mut checked) = (BTreeSet::new(), BTreeSet::new());
    for panel in &panels {
        for (_, expr) in &panel.exprs {
            for name in metric_names(expr) {
                for matchers in equality_matchers(expr, &name) {
                    let present = text.lines().filter(|l| !l.starts_with('#')).any(|line| {
                        let of_name = line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} "));
                        of_name
                            && matchers.iter().all(|m| {
                                ['{', ','].iter().any(|open| {
                                    ['}', ','].iter().any(|close| line.contains(&format!("{open}{m}{close}")))
                                })
                            })
                    });
                    if !present {
                        missing.insert(format!("{}: {name}{{{}}}", panel.title, matchers.join(",")));
                    }
                    checked.insert(name.clone());
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "series a panel reads that a fresh process does not export:\n{}\n{text}",
        missing.into_iter().collect::<Vec<_>>().join("\n")
    );
    assert!(checked.contains("payout_failovers_total") && checked.contains("http_requests_total"), "{checked:?}");
    assert!(checked.len() >= 30, "only {} series names checked: {checked:?}", checked.len());
}

/// The "Metrics to look at" section of a runbook page.
fn metrics_section(page: &str) -> Option<&str> {
    let start = page.find("## Metrics to look at")?;
    let body = &page[start + "## Metrics to look at".len()..];
    Some(body.find("\n## ").map_or(body, |end| &body[..end]))
}

#[test]
fn every_runbook_page_names_a_dashboard_panel_by_its_exact_title() {
    let titles: Vec<String> = panels(&dashboard()).into_iter().map(|p| p.title).collect();
    let pages: Vec<(String, String)> = pages().into_iter().filter(|(name, _)| name != "README.md").collect();
    assert!(pages.len() >= 47, "{} pages", pages.len());
    // The API alerts' pages are among them (they name the API panels).
    for page in ["alert-api-5xx-rate.md", "alert-create-latency.md"] {
        assert!(pages.iter().any(|(name, _)| name == page), "no runbooks/{page}");
    }
    for (name, text) in &pages {
        let section = metrics_section(text).unwrap_or_else(|| panic!("{name} has no `## Metrics to look at`"));
        // Markdown renders a line break as a space: a title may wrap.
        let flat = section.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            titles.iter().any(|t| flat.contains(t.as_str())),
            "{name}: its \"Metrics to look at\" names no dashboard panel by its exact title"
        );
        // A "Dashboard panels" paragraph names panels in bold: every one of them is a real title.
        for paragraph in section.split("\n\n").map(|p| p.split_whitespace().collect::<Vec<_>>().join(" ")) {
            if !paragraph.starts_with("Dashboard panels") {
                continue;
            }
            for named in paragraph.split("**").skip(1).step_by(2) {
                assert!(titles.iter().any(|t| t == named), "{name}: no panel titled `{named}`");
            }
        }
    }
}
