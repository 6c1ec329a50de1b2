//! The `withdrawals-tools` binary and the two command lines' documentation, tested from outside:
//! the binary is built (cargo builds a package's binaries for its integration tests, which is how
//! `scripts/test` gets the one its chaos run starts), it finds the service binary or says in one
//! line why not, and the README's configuration table names every variable either binary reads.

use std::collections::BTreeMap;
use std::process::Command;

use clap::CommandFactory;

/// Every environment variable a command reads, with the default clap gives it ("" for none).
fn clap_defaults(command: &clap::Command, into: &mut BTreeMap<String, String>) {
    for arg in command.get_arguments() {
        if let Some(env) = arg.get_env() {
            let default = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
            into.insert(env.to_string_lossy().into_owned(), default);
        }
    }
    for sub in command.get_subcommands() {
        clap_defaults(sub, into);
    }
}

/// The README's configuration table, variable by variable: a row naming `A`, `B` with
/// defaults `1`, `2` pairs them in order; a row whose defaults are not one per variable
/// (`empty`, a dash) pairs nothing.
fn readme_defaults() -> BTreeMap<String, Option<String>> {
    let readme = include_str!("../../README.md");
    let table = readme.split("\n## Configuration\n").nth(1).expect("a Configuration section");
    let table = table.split("\n## ").next().unwrap_or_default();
    let ticked = |cell: &str| -> Vec<String> { cell.split('`').skip(1).step_by(2).map(str::to_owned).collect() };
    let mut rows = BTreeMap::new();
    for line in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let vars: Vec<String> = ticked(cells[0])
            .into_iter()
            .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .collect();
        let defaults = ticked(cells.get(1).copied().unwrap_or_default());
        for (i, var) in vars.iter().enumerate() {
            let default = (defaults.len() == vars.len()).then(|| defaults[i].clone());
            rows.insert(var.clone(), default);
        }
    }
    rows
}

#[test]
fn the_readme_configuration_table_names_every_variable_of_both_binaries_with_its_default() {
    let mut clap = BTreeMap::new();
    clap_defaults(&withdrawals::cli::Cli::command(), &mut clap);
    clap_defaults(&withdrawals_tools::cli::Cli::command(), &mut clap);
    let readme = readme_defaults();
    let mut wrong = Vec::new();
    for (var, default) in &clap {
        match readme.get(var) {
            None => wrong.push(format!("{var} is not in the README's configuration table")),
            Some(Some(stated)) if stated != default => {
                wrong.push(format!("{var}: the README says `{stated}`, the CLI's default is `{default}`"))
            }
            Some(None) if !default.is_empty() => {
                wrong.push(format!("{var}: the README states no default, the CLI's is `{default}`"))
            }
            Some(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(clap.len() > 40, "the walk found the CLI's variables: {}", clap.len());
    assert!(clap.contains_key("CHAOS_POSTGRES_URL") && clap.contains_key("BENCH_POSTGRES_URL"), "the tools' too");
}

/// `withdrawals-tools` offers the two tools, and a chaos run with no service binary to start
/// fails at once with one line naming what is missing, never a panic or a hang.
#[test]
fn the_tools_binary_offers_chaos_and_bench_and_says_in_one_line_when_the_service_is_missing() {
    let tools = env!("CARGO_BIN_EXE_withdrawals-tools");
    let help = Command::new(tools).arg("--help").output().expect("run withdrawals-tools --help");
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("chaos") && help.contains("bench"), "{help}");

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-withdrawals");
    let run = Command::new(tools)
        .args(["chaos", "--backend", "sqlite", "--withdrawals", "1", "--duration", "1s", "--dir"])
        .arg(dir.path().join("run"))
        .env("WITHDRAWALS_BIN", &missing)
        .output()
        .expect("run withdrawals-tools chaos");
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("WITHDRAWALS_BIN") && lines[0].contains("no-such-withdrawals"), "{stderr}");
}
