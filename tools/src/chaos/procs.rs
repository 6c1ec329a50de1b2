//! The processes a chaos run starts and kills: `withdrawals` API and workers, the provider mock
//! (all the service binary, [`service_binary`]),
//! and (for PostgreSQL) a throwaway database cluster it can restart.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::process::{Child, Command};

/// The `withdrawals` binary the tools start as `serve`, `worker` and `provider-mock`:
/// `WITHDRAWALS_BIN` when set, otherwise the `withdrawals` beside this binary (cargo builds both
/// into one target directory; a test binary under `deps/` looks one level up).
pub fn service_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("WITHDRAWALS_BIN") {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!("WITHDRAWALS_BIN={} is not a file", path.display());
        }
        return Ok(path);
    }
    let me = std::env::current_exe().context("locate this binary")?;
    let dir = me.parent().context("this binary has no directory")?;
    let beside = dir.join("withdrawals");
    let above = dir.parent().map(|up| up.join("withdrawals"));
    [Some(beside.clone()), above].into_iter().flatten().find(|p| p.is_file()).with_context(|| {
        format!(
            "the service binary {} is not there: build it with `cargo build --workspace` (or --release), \
             or set WITHDRAWALS_BIN",
            beside.display()
        )
    })
}

/// One child process, restartable, its output appended to `log`.
pub struct Proc {
    pub name: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    pub log: PathBuf,
    child: Option<Child>,
}

/// A provider mock as its own process (`withdrawals provider-mock`), named `name`: on `port`, with
/// its own seed and API key, sending its signed events to `webhook_url` under `webhook_secret`.
pub fn provider_mock(
    name: &str,
    dir: &Path,
    port: u16,
    seed: u64,
    api_key: &str,
    webhook_url: &str,
    webhook_secret: &str,
) -> Proc {
    let (port, seed) = (port.to_string(), seed.to_string());
    let args = [
        "provider-mock",
        "--port",
        &port,
        "--seed",
        &seed,
        "--api-key",
        api_key,
        "--webhook-url",
        webhook_url,
        "--webhook-secret",
        webhook_secret,
    ];
    Proc::new(name, &args, &[], dir)
}

impl Proc {
    pub fn new(name: &str, args: &[&str], env: &[(String, String)], dir: &Path) -> Self {
        Proc {
            name: name.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: env.to_vec(),
            log: dir.join(format!("{name}.log")),
            child: None,
        }
    }

    pub fn start(&mut self) -> anyhow::Result<()> {
        let exe = service_binary()?;
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new(exe)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", self.name))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL: no shutdown, no cleanup, exactly what a crash looks like.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// SIGTERM and wait (a graceful stop), then SIGKILL after `grace`.
    pub async fn stop(&mut self, grace: Duration) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = child.id() {
                let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
            }
            if tokio::time::timeout(grace, child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }

    /// The running child's process id (to read `/proc/PID/status`), if it is running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// Fails when the process has exited on its own.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(child) = self.child.as_mut() {
            if let Some(status) = child.try_wait()? {
                bail!("{} exited unexpectedly ({status}); see {}", self.name, self.log.display());
            }
        }
        Ok(())
    }
}

pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A throwaway PostgreSQL cluster (initdb/pg_ctl), run as `postgres` when we are root.
pub struct PgCluster {
    bin: PathBuf,
    data: PathBuf,
    socket_dir: PathBuf,
    pub port: u16,
    run_as: Option<String>,
}

impl PgCluster {
    /// Finds PostgreSQL's binaries, or None when they are not installed.
    pub fn find_bin() -> Option<PathBuf> {
        let mut candidates = vec![PathBuf::from("/usr/lib/postgresql/15/bin")];
        if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
            candidates.extend(entries.flatten().map(|e| e.path().join("bin")));
        }
        candidates.into_iter().find(|dir| dir.join("initdb").exists() && dir.join("pg_ctl").exists())
    }

    pub fn init(bin: PathBuf, dir: &Path) -> anyhow::Result<Self> {
        let root = dir.join("pg");
        std::fs::create_dir_all(&root)?;
        let is_root =
            std::process::Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false);
        let run_as = if is_root {
            let status = std::process::Command::new("chown").arg("-R").arg("postgres").arg(dir).status()?;
            if !status.success() {
                bail!("running as root needs a `postgres` user to own the throwaway cluster");
            }
            Some("postgres".to_owned())
        } else {
            None
        };
        let cluster = PgCluster { bin, data: root.join("data"), socket_dir: root.clone(), port: free_port()?, run_as };
        cluster
            .pg("initdb", &["-D", path(&cluster.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])?;
        Ok(cluster)
    }

    fn pg(&self, tool: &str, args: &[&str]) -> anyhow::Result<()> {
        let exe = self.bin.join(tool);
        let output = match &self.run_as {
            Some(user) => {
                std::process::Command::new("runuser").arg("-u").arg(user).arg("--").arg(&exe).args(args).output()
            }
            None => std::process::Command::new(&exe).args(args).output(),
        }
        .with_context(|| format!("run {tool}"))?;
        if !output.status.success() {
            bail!("{tool} failed: {}", String::from_utf8_lossy(&output.stderr).trim());
        }
        Ok(())
    }

    fn options(&self) -> String {
        format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=300 -c shared_buffers=128MB",
            self.port,
            self.socket_dir.display()
        )
    }

    pub fn start(&self) -> anyhow::Result<()> {
        let log = self.socket_dir.join("server.log");
        self.pg("pg_ctl", &["-D", path(&self.data), "-l", path(&log), "-w", "-t", "60", "-o", &self.options(), "start"])
    }

    /// An immediate-mode restart: the server dies without a checkpoint (a crash) and comes back.
    /// (`pg_ctl restart` has no `-l`: the server would inherit our pipe, so stop, then start.)
    pub fn restart(&self) -> anyhow::Result<()> {
        self.pg("pg_ctl", &["-D", path(&self.data), "-m", "immediate", "-w", "stop"])?;
        self.start()
    }

    pub fn stop(&self) {
        let _ = self.pg("pg_ctl", &["-D", path(&self.data), "-m", "immediate", "stop"]);
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}
