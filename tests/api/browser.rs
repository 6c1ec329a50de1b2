//! A real headless Chromium for the console tests, driven over WebDriver (fantoccini talking to
//! Debian's `chromedriver`). Never skipped: without Chromium the tests fail and say how to install
//! it (`scripts/test` installs `chromium` and `chromium-driver` when they are missing).
//!
//! At most two browsers run at once (this machine has two cores). Screenshots go to
//! `target/console-screenshots/`.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use tokio::sync::{Semaphore, SemaphorePermit};

static BROWSERS: Semaphore = Semaphore::const_new(2);
const WAIT: Duration = Duration::from_secs(30);

pub struct Browser {
    pub client: Client,
    base_url: String,
    /// `sqlite` or `postgres`: screenshots of both backends are kept apart.
    backend: &'static str,
    driver: Child,
    _profile: tempfile::TempDir,
    _permit: SemaphorePermit<'static>,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver leads its own process group, Chromium included: end them all.
        unsafe { libc::kill(-(self.driver.id() as i32), libc::SIGKILL) };
        let _ = self.driver.wait();
    }
}

fn find_program(env: &str, candidates: &[&str]) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    candidates.iter().map(PathBuf::from).find(|p| p.exists()).unwrap_or_else(|| {
        panic!(
            "the console tests need Chromium and ChromeDriver ({}); install Debian's `chromium` and \
             `chromium-driver` (scripts/test does), or set {env}",
            candidates.join(" or ")
        )
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("console-screenshots")
}

impl Browser {
    pub async fn start(app: &crate::harness::TestApp) -> Browser {
        let permit = BROWSERS.acquire().await.expect("browser semaphore");
        let chromedriver = find_program("CHROMEDRIVER", &["/usr/bin/chromedriver"]);
        let chromium = find_program("CHROMIUM", &["/usr/bin/chromium"]);
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--window-size=1280,1000", format!("--user-data-dir={}", profile.path().display()),
                ]
            }
        });
        let capabilities = capabilities.as_object().unwrap().clone();
        let url = format!("http://127.0.0.1:{port}");
        let deadline = tokio::time::Instant::now() + WAIT;
        let client = loop {
            let mut builder = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
            match builder.capabilities(capabilities.clone()).connect(&url).await {
                Ok(client) => break client,
                Err(err) => {
                    assert!(tokio::time::Instant::now() < deadline, "chromedriver did not start a session: {err}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let backend = if app.database_url.starts_with("sqlite") { "sqlite" } else { "postgres" };
        Browser { client, base_url: app.base_url.clone(), backend, driver, _profile: profile, _permit: permit }
    }

    pub async fn goto(&self, path: &str) {
        self.client.goto(&format!("{}{path}", self.base_url)).await.unwrap();
    }

    pub async fn path(&self) -> String {
        let url = self.client.current_url().await.unwrap();
        match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        }
    }

    pub async fn body_text(&self) -> String {
        self.client.find(Locator::Css("body")).await.unwrap().text().await.unwrap()
    }

    /// Polls until the page's text contains `needle` (pages change after a click's navigation).
    pub async fn wait_for_text(&self, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Ok(body) = self.client.find(Locator::Css("body")).await {
                if let Ok(text) = body.text().await {
                    if text.contains(needle) {
                        return text;
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                let path = self.path().await;
                panic!("page {path} never showed {needle:?}; it shows:\n{}", self.body_text().await);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Polls until the current path starts with `prefix`.
    pub async fn wait_for_path(&self, prefix: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let path = self.path().await;
            if path.starts_with(prefix) {
                return path;
            }
            assert!(tokio::time::Instant::now() < deadline, "never reached {prefix}; still on {path}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn fill(&self, css: &str, text: &str) {
        let field = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no field {css}: {e}"));
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    pub async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("nothing to click at {css}: {e}"))
            .click()
            .await
            .unwrap();
    }

    pub async fn exists(&self, css: &str) -> bool {
        !self.client.find_all(Locator::Css(css)).await.unwrap().is_empty()
    }

    /// Signs in with an operator token through the sign-in form.
    pub async fn sign_in(&self, token: &str) {
        self.goto("/ops/overview").await;
        self.wait_for_path("/ops/sign-in").await;
        self.fill("#token", token).await;
        self.click("form[action='/ops/sign-in'] button[type=submit]").await;
        self.wait_for_path("/ops/overview").await;
        self.wait_for_text("Signed in as").await;
    }

    pub async fn sign_out(&self) {
        self.click("#sign-out").await;
        self.wait_for_text("You are signed out.").await;
    }

    /// Saves a full-window screenshot as `target/console-screenshots/<backend>-<name>.png`.
    /// Checks what a screen reader and a keyboard need: one `h1`, a page language, a label for
    /// every field, text on every link and button, nothing taken out of the tab order, only
    /// native controls for actions, and every time with its exact UTC time on hover.
    pub async fn assert_accessible(&self) {
        let problems = self
            .client
            .execute(
                "const problems = [];
                 if (!document.documentElement.lang) problems.push('no lang attribute');
                 if (document.querySelectorAll('h1').length !== 1) problems.push('not exactly one h1');
                 for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea')) {
                   if (!el.labels || el.labels.length === 0) problems.push('unlabelled field ' + el.outerHTML.slice(0, 100));
                 }
                 for (const el of document.querySelectorAll('a, button')) {
                   if (!el.textContent.trim()) problems.push('no text: ' + el.outerHTML.slice(0, 100));
                 }
                 for (const el of document.querySelectorAll('[tabindex=\"-1\"], [onclick]')) {
                   problems.push('not keyboard-native: ' + el.outerHTML.slice(0, 100));
                 }
                 for (const el of document.querySelectorAll('time')) {
                   if (!/ UTC$/.test(el.title)) problems.push('time without its UTC title: ' + el.outerHTML);
                 }
                 return problems;",
                vec![],
            )
            .await
            .unwrap();
        let path = self.path().await;
        assert_eq!(problems, serde_json::json!([]), "accessibility problems on {path}");
    }

    /// The window is stretched to the page's height first, so the whole page is in the picture.
    /// The page is checked with [`Browser::assert_accessible`] first.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        self.assert_accessible().await;
        let height = self.client.execute("return document.documentElement.scrollHeight;", vec![]).await.unwrap();
        let height = height.as_u64().unwrap_or(1000).clamp(600, 4000) as u32;
        self.client.set_window_size(1280, height + 140).await.unwrap();
        let png = self.client.screenshot().await.unwrap();
        self.client.set_window_size(1280, 1000).await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}-{name}.png", self.backend));
        std::fs::write(&path, png).unwrap();
        path
    }
}
