//! A headless Chromium driven by chromedriver over the WebDriver protocol, for the browser
//! tests (compiled when `ACP_TEST_BROWSER` is set at build time).

use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::{Child, Command};

use crate::helpers::*;

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process and one browser session.
pub(crate) struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

impl Browser {
    pub(crate) async fn start() -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(
            std::env::var("ACP_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into()),
        )
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver (apt-get install chromium-driver)");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        for _ in 0..100 {
            if http.get(format!("{base}/status")).send().await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let dir = tempfile::tempdir().unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": std::env::var("ACP_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     format!("--user-data-dir={}", dir.keep().display())]
        }}}});
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        Browser {
            driver,
            base,
            session,
            http,
        }
    }

    pub(crate) async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let res = self
            .http
            .request(method, url)
            .json(&body)
            .send()
            .await
            .unwrap();
        res.json::<Value>().await.unwrap()["value"].clone()
    }

    pub(crate) async fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", json!({"url": url}))
            .await;
    }

    pub(crate) async fn element(&self, css: &str) -> String {
        for _ in 0..50 {
            let found = self
                .call(
                    reqwest::Method::POST,
                    "/element",
                    json!({"using": "css selector", "value": css}),
                )
                .await;
            if let Some(id) = found[ELEMENT].as_str() {
                return id.to_owned();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no element `{css}`");
    }

    pub(crate) async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            json!({}),
        )
        .await;
    }

    pub(crate) async fn text(&self, css: &str) -> String {
        let id = self.element(css).await;
        self.call(
            reqwest::Method::GET,
            &format!("/element/{id}/text"),
            json!({}),
        )
        .await
        .as_str()
        .unwrap_or("")
        .to_owned()
    }

    /// Waits until the element's text is `want`.
    pub(crate) async fn wait_text(&self, css: &str, want: &str) {
        let mut last = String::new();
        for _ in 0..100 {
            last = self.text(css).await;
            if last == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("`{css}` shows `{last}`, expected `{want}`");
    }

    /// True when an element matches now (no waiting).
    pub(crate) async fn exists(&self, css: &str) -> bool {
        let found = self
            .call(
                reqwest::Method::POST,
                "/elements",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        found.as_array().is_some_and(|all| !all.is_empty())
    }

    /// Types `text` into the element.
    pub(crate) async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            json!({"text": text}),
        )
        .await;
    }

    /// Runs `script` in the page, with `args`.
    pub(crate) async fn execute(&self, script: &str, args: Value) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
        .await
    }

    /// Opens the app's login page and sets the person's session cookie, as after following a
    /// login link in this browser.
    pub(crate) async fn log_in_as(&self, app: &TestApp, person: &crate::helpers::Browser) {
        self.open(&app.url("/login")).await;
        let (name, value) = person.cookie.split_once('=').unwrap();
        self.set_cookie(name, value).await;
    }

    pub(crate) async fn set_cookie(&self, name: &str, value: &str) {
        self.call(
            reqwest::Method::POST,
            "/cookie",
            json!({"cookie": {"name": name, "value": value, "path": "/"}}),
        )
        .await;
    }

    pub(crate) async fn quit(mut self) {
        self.call(reqwest::Method::DELETE, "", json!({})).await;
        let _ = self.driver.kill().await;
    }
}
