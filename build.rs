//! Captures the git commit the binary is built from, for the dead-letter envelope's
//! `worker_version` (SPEC §6: the code-bug runbook finds the deploy by it). Outside a git checkout
//! (a source tarball, a vendored build) the commit is "unknown". Also rebuilds when a migration
//! is added.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| !c.is_empty());
    println!("cargo:rustc-env=WITHDRAWALS_GIT_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
    // Rebuild when HEAD moves: a commit, a checkout, a rebase. Only files that exist are
    // watched: cargo treats a missing watched file as always changed, which rebuilt the crate on
    // every build in a checkout without `packed-refs`. Branch refs live in the common git dir
    // (a worktree's own git dir holds only its HEAD).
    let git_dir = git(&["rev-parse", "--git-dir"]);
    let common_dir = git(&["rev-parse", "--git-common-dir"]).or_else(|| git_dir.clone());
    if let (Some(git_dir), Some(common_dir)) = (git_dir, common_dir) {
        let (git_dir, common_dir) = (Path::new(&git_dir), Path::new(&common_dir));
        let mut watched = vec![git_dir.join("HEAD"), common_dir.join("packed-refs")];
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(common_dir.join(head_ref));
        }
        for path in watched.iter().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    // `sqlx::migrate!` embeds the migrations at compile time but cannot tell cargo that a new file
    // in their folders matters: without this, adding a migration rebuilt nothing and the binary
    // kept the old set (sqlx's own advice).
    println!("cargo:rerun-if-changed=migrations");
}
