//! Captures the git commit the binary is built from, for the dead-letter envelope's
//! `worker_version` (SPEC §6: the code-bug runbook finds the deploy by it). Outside a git checkout
//! (a source tarball, a vendored build) the commit is "unknown".

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| !c.is_empty());
    println!("cargo:rustc-env=WITHDRAWALS_GIT_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
    // Rebuild when HEAD moves: a commit, a checkout, a rebase.
    if let Some(git_dir) = git(&["rev-parse", "--git-dir"]) {
        let git_dir = Path::new(&git_dir);
        println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", git_dir.join(head_ref).display());
        }
        println!("cargo:rerun-if-changed={}", git_dir.join("packed-refs").display());
    }
    println!("cargo:rerun-if-changed=build.rs");
}
