//! The human summary of a chaos run, printed from its JSON report.

use serde_json::Value;

use super::{notifications, operator, settlement, two_providers, webhooks};

pub(super) fn print_summary(report: &Value) {
    let f = &report["findings"];
    let c = &report["customers"];
    let i = &report["injected"];
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    eprintln!("\n== chaos run: {} seed {} ==", report["backend"].as_str().unwrap_or("?"), report["seed"]);
    eprintln!(
        "customers: {} requested, {} accepted, {} rejected; {} client retries, {} sequential and {} concurrent duplicate sends ({} replays seen), {} cancels asked ({} took effect), {} invalid destinations",
        n(&c["requested"]), n(&c["accepted"]), n(&c["rejected"]), n(&c["client_retries"]), n(&c["sequential_duplicates"]),
        n(&c["concurrent_duplicates"]), n(&c["replays_seen"]), n(&c["cancels_requested"]), n(&c["cancels_accepted"]),
        n(&c["invalid_destinations"])
    );
    eprintln!(
        "injected: {} worker SIGKILLs, {} database restarts, {} s lookup outage, {} s async settlement, {} s slow settlement ({} ms, past the {} ms reconciliation window), {} s webhook faults {}; provider answers: {}",
        n(&i["worker_kills"]), n(&i["database_restarts"]), n(&i["lookup_outage_seconds"]), n(&i["async_settlement_seconds"]),
        n(&i["slow_settlement_seconds"]), n(&i["slow_settlement_delay_ms"]), n(&i["reconcile_window_ms"]),
        n(&i["webhook_fault_seconds"]), i["webhook_faults"], i["provider_outcomes"]
    );
    let o = &report["operator"];
    eprintln!(
        "operator: {}; {} passes ({} settled), {} visits, {} requests, {} withdrawals met in review with their transfer pending",
        operator::describe(&o["actions"]),
        n(&o["passes"]),
        n(&o["settled_passes"]),
        n(&o["visits"]),
        n(&o["requests"]),
        n(&o["pending_at_provider_in_review"])
    );
    eprintln!(
        "final states: {}  ({} in the database); requires_review evidence: {} with a dead letter, {} with a reconciliation result",
        f["final_states"], n(&f["withdrawals_in_database"]), n(&f["review_with_dead_letter"]), n(&f["review_with_reconciliation"])
    );
    eprintln!("decided by channel: {}", f["decided_by"]);
    eprintln!(
        "checked: {} provider transfers ({} paid) for executions per key, {} dead letters and {} bytes of logs for secrets",
        n(&f["provider_executions_checked"]), n(&f["paid_transfers"]), n(&f["dead_letters_scanned"]), n(&f["log_bytes_scanned"])
    );
    for line in settlement::describe(&report["settlement"]) {
        eprintln!("{line}");
    }
    for line in webhooks::describe(&report["webhooks"]) {
        eprintln!("{line}");
    }
    for line in notifications::describe(&report["notifications"]) {
        eprintln!("{line}");
    }
    if report["two_providers"].is_object() {
        for line in two_providers::describe(&report["two_providers"]) {
            eprintln!("{line}");
        }
    }
    eprintln!(
        "time: fault phase {:.0} s, convergence {:.1} s, total {:.0} s",
        report["fault_phase_seconds"].as_f64().unwrap_or(0.0),
        report["convergence_seconds"].as_f64().unwrap_or(0.0),
        report["total_seconds"].as_f64().unwrap_or(0.0)
    );
    let violations = f["violations"].as_array().cloned().unwrap_or_default();
    if violations.is_empty() {
        eprintln!("violations: none\n");
    } else {
        eprintln!("violations ({}):", violations.len());
        for v in violations {
            eprintln!("  - {}", v.as_str().unwrap_or_default());
        }
        eprintln!();
    }
}
