//! The runbooks and the alert rules are part of the product (SPEC §9): every `withdrawals …`
//! command a runbook tells on-call to run parses with the real CLI, every alert names a severity,
//! a summary and a runbook page that exists, and every metric an alert reads is one we export.
//! (`promtool check rules` / `promtool test rules` run in `scripts/test`.)

use std::path::{Path, PathBuf};

use clap::Parser;
use withdrawals::cli::Cli;

pub(crate) fn runbooks_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("runbooks")
}

/// Every page of `runbooks/` (its README included), by file name.
pub(crate) fn pages() -> Vec<(String, String)> {
    let mut pages: Vec<(String, String)> = std::fs::read_dir(runbooks_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    pages.sort();
    pages
}

/// The `withdrawals …` lines of a page's ```sh blocks: trailing comments cut, `\` continuations joined.
fn commands(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in page.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_sh = matches!(trimmed, "```sh" | "```bash" | "```shell");
            continue;
        }
        if !in_sh {
            continue;
        }
        let line = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
        if pending.is_empty() && !line.starts_with("withdrawals ") && line != "withdrawals" {
            continue;
        }
        if let Some(continued) = line.strip_suffix('\\') {
            pending.push_str(continued);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let command = match pending.find(" #") {
            Some(i) => pending[..i].trim_end().to_owned(),
            None => pending.trim_end().to_owned(),
        };
        out.push(command);
        pending.clear();
    }
    out
}

#[test]
fn every_runbook_command_parses_with_the_cli() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for (name, text) in pages() {
        for command in commands(&text) {
            let mut words = shlex::split(&command).unwrap_or_else(|| panic!("{name}: cannot split `{command}`"));
            // A redirection of the output (`> file.jsonl`) is the shell's, not the CLI's.
            if let Some(at) = words.iter().position(|w| w == ">" || w == ">>") {
                assert_eq!(words.len(), at + 2, "{name}: `{command}`: one file after the redirection");
                words.truncate(at);
            }
            if let Err(err) = Cli::try_parse_from(&words) {
                let first = err.to_string().lines().next().unwrap_or_default().to_owned();
                broken.push(format!("{name}: `{command}`: {first}"));
            }
            checked += 1;
        }
    }
    assert!(broken.is_empty(), "runbook commands that do not parse:\n{}", broken.join("\n"));
    assert!(checked >= 30, "only {checked} commands found: the extraction is broken");
}

#[test]
fn the_command_extraction_finds_what_a_runbook_shows() {
    let page = "text\n```sh\nexport WITHDRAWALS_TOKEN=x\nwithdrawals dlq summary   # step one\nwithdrawals review resolve \\\n  ID fail --reason \"r\" --version 2\n```\n```text\nwithdrawals not a command\n```\n";
    assert_eq!(
        commands(page),
        ["withdrawals dlq summary", "withdrawals review resolve  ID fail --reason \"r\" --version 2"]
    );
    let bad = shlex::split("withdrawals review resolve ID explode --reason r --version 2").unwrap();
    assert!(Cli::try_parse_from(bad).is_err(), "an unknown action is refused, so a typo would be caught");
}

/// One alert rule, read from `alerts.yml` (our own layout: `- alert:` then its fields).
#[derive(Debug, Default)]
struct Rule {
    name: String,
    expr: String,
    severity: Option<String>,
    summary: Option<String>,
    runbook_url: Option<String>,
}

fn rules() -> Vec<Rule> {
    let text = std::fs::read_to_string(runbooks_dir().join("alerts.yml")).unwrap();
    let mut rules: Vec<Rule> = Vec::new();
    let mut in_expr = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            rules.push(Rule { name: name.trim().to_owned(), ..Rule::default() });
            in_expr = false;
            continue;
        }
        let Some(rule) = rules.last_mut() else { continue };
        if let Some(expr) = trimmed.strip_prefix("expr:") {
            rule.expr = expr.trim().trim_start_matches('|').to_owned();
            in_expr = true;
        } else if in_expr && line.starts_with("          ") && !trimmed.contains(": ") {
            rule.expr.push(' ');
            rule.expr.push_str(trimmed);
        } else {
            in_expr = false;
            let value = |prefix: &str| trimmed.strip_prefix(prefix).map(|v| v.trim().trim_matches('"').to_owned());
            rule.severity = rule.severity.take().or_else(|| value("severity:"));
            rule.summary = rule.summary.take().or_else(|| value("summary:"));
            rule.runbook_url = rule.runbook_url.take().or_else(|| value("runbook_url:"));
        }
    }
    rules
}

/// The catalogue family a series name belongs to: a histogram family is read through its
/// `_bucket`, `_sum` and `_count` series too.
pub(crate) fn family(name: &str) -> Option<&'static str> {
    let catalogue = withdrawals::metrics::CATALOGUE;
    if let Some((family, _, _)) = catalogue.iter().find(|(n, _, _)| *n == name) {
        return Some(family);
    }
    ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
        let base = name.strip_suffix(suffix)?;
        catalogue.iter().find(|(n, kind, _)| *n == base && *kind == "histogram").map(|(n, _, _)| *n)
    })
}

/// Where `word` occurs as a whole word.
pub(crate) fn find_word(text: &str, word: &str) -> Option<usize> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).map(|(i, _)| i).find(|&i| {
        let before = text[..i].chars().next_back().is_none_or(|c| !is_ident(c));
        let after = text[i + word.len()..].chars().next().is_none_or(|c| !is_ident(c));
        before && after
    })
}

/// The metric names an expression reads: identifiers that are not functions, keywords, label
/// names, grouping labels or durations (the alert rules' and the dashboard's).
pub(crate) fn metric_names(expr: &str) -> Vec<String> {
    let mut cleaned = String::new();
    let mut depth_brace = 0;
    let mut depth_bracket = 0;
    for c in expr.chars() {
        match c {
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            _ => cleaned.push(c),
        }
        if matches!(c, '{' | '}' | '[' | ']') {
            cleaned.push(' ');
        }
    }
    // Grouping labels: `by (a, b)`, `without (…)`, `on (…)`, `ignoring (…)`.
    for keyword in ["by", "without", "on", "ignoring", "group_left", "group_right"] {
        while let Some(start) = find_word(&cleaned, keyword) {
            let Some(open) = cleaned[start..].find('(').map(|i| start + i) else { break };
            let close = cleaned[open..].find(')').map_or(cleaned.len(), |i| open + i + 1);
            cleaned.replace_range(start..close, " ");
        }
    }
    let mut names = Vec::new();
    let chars: Vec<char> = cleaned.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !(chars[i].is_ascii_alphabetic() || chars[i] == '_') {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        // The unit of a duration (`offset 10m`) or a number's exponent (`1e-9`) follows a digit.
        if start > 0 && chars[start - 1].is_ascii_digit() {
            continue;
        }
        let next = chars[i..].iter().find(|c| !c.is_whitespace());
        let is_call = next == Some(&'(');
        let keyword = matches!(word.as_str(), "and" | "or" | "unless" | "bool" | "offset")
            || matches!(
                word.as_str(),
                "sum" | "min" | "max" | "avg" | "count" | "group" | "topk" | "bottomk" | "quantile"
            );
        if !is_call && !keyword {
            names.push(word);
        }
    }
    names
}

#[test]
fn every_alert_has_a_severity_a_summary_a_runbook_page_and_known_metrics() {
    let rules = rules();
    assert!(rules.len() >= 8, "{rules:#?}");
    for rule in &rules {
        assert!(
            matches!(rule.severity.as_deref(), Some("page" | "ticket")),
            "{}: severity {:?}",
            rule.name,
            rule.severity
        );
        assert!(rule.summary.as_deref().is_some_and(|s| !s.is_empty()), "{}: no summary", rule.name);
        let url = rule.runbook_url.as_deref().unwrap_or_else(|| panic!("{}: no runbook_url", rule.name));
        let page =
            url.strip_prefix("runbooks/").unwrap_or_else(|| panic!("{}: {url} is not under runbooks/", rule.name));
        let text = std::fs::read_to_string(runbooks_dir().join(page))
            .unwrap_or_else(|_| panic!("{}: runbook page {url} does not exist", rule.name));
        assert!(text.contains(&rule.name), "{}: its page {url} does not name the alert", rule.name);
        let names = metric_names(&rule.expr);
        assert!(!names.is_empty(), "{}: no metric found in `{}`", rule.name, rule.expr);
        for name in names {
            assert!(
                family(&name).is_some(),
                "{}: `{name}` is not a metric we export (expr `{}`)",
                rule.name,
                rule.expr
            );
        }
    }
    let subjects = [
        "dead_letters_total",
        "dead_letters_oldest_open_seconds",
        "job_retries_exhausted_total",
        "withdrawal_transitions_total",
        "circuit_breaker_state",
        "withdrawals_oldest_in_state_seconds",
        "jobs_due",
        "ledger_invariant_violations",
        "settlement_exception_oldest_open_age_seconds",
        "ledger_check_failing",
        "auth_failures_total",
        "webhook_events_total",
        "webhook_last_received_timestamp_seconds",
    ];
    for subject in subjects {
        assert!(rules.iter().any(|r| r.expr.contains(subject)), "no alert reads {subject}");
    }
}

#[test]
fn every_runbook_page_has_the_sections_on_call_needs() {
    for (name, text) in pages() {
        if name == "README.md" {
            continue;
        }
        for heading in
            ["## What it means", "## Owner", "## Metrics to look at", "## What to run", "## Redaction", "## Escalation"]
        {
            assert!(text.contains(heading), "{name} has no `{heading}` section");
        }
    }
}

/// The settlement pages (SPEC §14) name every exception kind and every resolution the service
/// knows, so a kind added to the domain without its procedure fails here; and they show the
/// commands that investigate, resolve and check (which the test above parses with the CLI).
#[test]
fn the_settlement_pages_cover_every_kind_resolution_and_command_on_call_needs() {
    use withdrawals::domain::settlement::{ExceptionKind, Resolution};

    let page = |name: &str| {
        let (_, text) = pages().into_iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no runbooks/{name}"));
        text
    };
    let exceptions = page("settlement-exceptions.md");
    for kind in ExceptionKind::ALL {
        assert!(exceptions.contains(&format!("`{kind}`")), "settlement-exceptions.md does not explain `{kind}`");
    }
    for resolution in Resolution::ALL {
        assert!(
            exceptions.contains(&format!("`{resolution}`")),
            "settlement-exceptions.md does not say when to resolve as `{resolution}`"
        );
    }
    assert!(exceptions.contains("settlement_report_refused"), "the refused daily report's dead letter");
    let returned = page("payout-returned.md");

    let shown = |text: &str| commands(text).join("\n");
    for (name, text, wanted) in [
        (
            "settlement-exceptions.md",
            &exceptions,
            &[
                "withdrawals settlement exceptions",
                "withdrawals settlement show ",
                "withdrawals review show ",
                "withdrawals settlement resolve ",
                "withdrawals settlement import --date ",
                "withdrawals settlement import --file ",
                "withdrawals settlement reports",
                "withdrawals ledger verify --date ",
                "withdrawals dlq close ",
            ][..],
        ),
        (
            "payout-returned.md",
            &returned,
            &[
                "withdrawals settlement exceptions --kind returned",
                "withdrawals settlement show ",
                "withdrawals review show ",
                "withdrawals ledger verify --date ",
                "withdrawals settlement resolve ",
            ][..],
        ),
    ] {
        let commands = shown(text);
        for command in wanted {
            assert!(commands.contains(command), "{name} runs no `{command}…`; it runs:\n{commands}");
        }
    }
}

/// Issue 21's procedures are on the pages on-call opens: every dead-letter category's runbook
/// page exists with the sections, and the kill switch, the cluster view, reconcile-now, the
/// oldest-first list and the archive export are shown as commands (which the test above parses
/// with the CLI).
#[test]
fn the_on_call_pages_show_the_kill_switch_reconcile_now_and_the_archive() {
    use withdrawals::domain::Category;

    let all = pages();
    let page = |name: &str| {
        all.iter().find(|(n, _)| n == name).map(|(_, t)| t.clone()).unwrap_or_else(|| panic!("no runbooks/{name}"))
    };
    for category in Category::ALL {
        let name = category.runbook().trim_start_matches("runbooks/");
        assert!(page(name).contains(&format!("`{category}`")), "{name} does not name `{category}`");
    }
    let shown = |name: &str| commands(&page(name)).join("\n");
    for (name, wanted) in [
        (
            "provider-outage.md",
            &["withdrawals breakers force-open ", "withdrawals breakers release ", "withdrawals breakers"][..],
        ),
        ("alert-breaker-flapping.md", &["withdrawals breakers"][..]),
        (
            "dead-letter-infrastructure.md",
            &["withdrawals dlq list --category infrastructure --oldest-first", "withdrawals replay start "][..],
        ),
        ("alert-dead-letter-depth.md", &["withdrawals dlq summary", " --oldest-first"][..]),
        ("stuck-processing.md", &["withdrawals review reconcile "][..]),
        ("dead-letter-triage.md", &["withdrawals dlq export --before "][..]),
        (
            "alert-webhook-mismatch-run.md",
            &["withdrawals webhooks list --result mismatch", "withdrawals webhooks show "][..],
        ),
        (
            "alert-webhooks-silent.md",
            &["withdrawals review list --status processing", "withdrawals review reconcile "][..],
        ),
        (
            "webhook-secret-rotation.md",
            &["withdrawals webhooks list --result mismatch", "withdrawals review reconcile "][..],
        ),
    ] {
        let commands = shown(name);
        for command in wanted {
            assert!(commands.contains(command), "{name} does not show `{command}`:\n{commands}");
        }
    }
}

/// The triage table of `dead-letter-triage.md` has one row per dead-letter category the domain
/// knows, and no other: a category added without its next action fails here (issue 27 found
/// `provider_mismatch` and `infrastructure` missing).
#[test]
fn the_triage_table_has_a_row_for_every_dead_letter_category() {
    use withdrawals::domain::Category;

    let text = std::fs::read_to_string(runbooks_dir().join("dead-letter-triage.md")).unwrap();
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("| category |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    let mut listed: Vec<String> = rows
        .iter()
        .map(|row| {
            row.trim_start_matches('|').split('|').next().unwrap_or_default().trim().trim_matches('`').to_owned()
        })
        .collect();
    listed.sort();
    let mut known: Vec<String> = Category::ALL.iter().map(|c| c.as_str().to_owned()).collect();
    known.sort();
    assert_eq!(listed, known, "the triage table's categories against the domain's");
}

/// Every counter page reads a series' first sample (issue 27): an `increase()` of a counter in a
/// `page` rule comes with the `unless last_over_time(… offset …)` half that sees a new series.
#[test]
fn every_counter_page_also_counts_a_new_series_first_sample() {
    let rules = rules();
    let counter_pages: Vec<&Rule> =
        rules.iter().filter(|r| r.severity.as_deref() == Some("page") && r.expr.contains("increase(")).collect();
    assert!(counter_pages.len() >= 7, "{counter_pages:#?}");
    for rule in counter_pages {
        for counter in metric_names(&rule.expr).into_iter().filter(|n| n.ends_with("_total")) {
            // `withdrawal_transitions_total` is the ratio's denominator: every allowed transition
            // is pre-created at 0, and missing its first sample only lowers the ratio's base.
            if counter == "withdrawal_transitions_total" {
                continue;
            }
            assert!(
                rule.expr.contains(&format!("unless last_over_time({counter}")),
                "{}: `{counter}` is read with increase() only, which misses a new series' first sample",
                rule.name
            );
        }
    }
}
