//! Headless Chromium driven over the W3C WebDriver protocol (JSON over HTTP to `chromedriver`),
//! for the tests of the pages the server serves. `chromedriver` and `chromium` are Debian's
//! `chromium-driver` and `chromium` packages (scripts/install_chromium.sh installs them);
//! `VLLM_RS_CHROMEDRIVER` / `VLLM_RS_CHROMIUM` point elsewhere.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The key WebDriver gives element references under.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// WebDriver's code for the Enter key.
pub const ENTER: &str = "\u{E007}";

pub struct Browser {
    driver: Child,
    session: String,
    agent: ureq::Agent,
}

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).flat_map(|dir| names.iter().map(move |n| dir.join(n))).find(|p| p.is_file())
}

fn tool(env: &str, names: &[&str]) -> Option<PathBuf> {
    std::env::var_os(env).map(PathBuf::from).filter(|p| p.is_file()).or_else(|| on_path(names))
}

/// Chromium and chromedriver, or why they are missing. With `VLLM_RS_REQUIRE_BROWSER=1`
/// (scripts/test.sh sets it once it has installed them) a missing one fails the test instead.
pub fn find_tools() -> Result<(PathBuf, PathBuf), String> {
    let driver = tool("VLLM_RS_CHROMEDRIVER", &["chromedriver"]);
    let chromium = tool("VLLM_RS_CHROMIUM", &["chromium", "chromium-browser"]);
    match (driver, chromium) {
        (Some(d), Some(c)) => Ok((d, c)),
        _ => {
            let why = "chromedriver or chromium is not installed (Debian: apt-get install chromium chromium-driver; \
                       scripts/install_chromium.sh)";
            assert!(std::env::var("VLLM_RS_REQUIRE_BROWSER").as_deref() != Ok("1"), "{why}");
            Err(why.to_string())
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session with a `width`×`height` window.
    pub fn start(driver: &Path, chromium: &Path, width: u32, height: u32) -> Browser {
        let port = free_port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", driver.display()));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        let mut b = Browser { driver: child, session: format!("http://127.0.0.1:{port}"), agent };
        let t0 = Instant::now();
        while b.agent.get(format!("{}/status", b.session)).call().is_err() {
            assert!(t0.elapsed() < Duration::from_secs(30), "chromedriver did not start on port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"];
        let mut args: Vec<String> = args.map(String::from).to_vec();
        args.push(format!("--window-size={width},{height}"));
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args}}}});
        let created = b.call("POST", "/session", Some(caps));
        let id = created["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {created}")).to_string();
        b.session = format!("{}/session/{id}", b.session);
        b
    }

    /// One WebDriver command; its `value`. A WebDriver error panics with its message.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.session);
        let resp = match (method, body) {
            ("GET", _) => self.agent.get(&url).call(),
            ("DELETE", _) => self.agent.delete(&url).call(),
            (_, body) => self
                .agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(body.unwrap_or_else(|| json!({})).to_string()),
        };
        let mut resp = resp.unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.body_mut().with_config().limit(64 << 20).read_to_string().expect("WebDriver answer");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}: {text}"));
        assert!(status == 200, "WebDriver {method} {path} -> {status}: {}", v["value"]);
        v.get("value").cloned().unwrap_or(Value::Null)
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url})));
    }

    /// The element `css` selects (the first one).
    pub fn find(&self, css: &str) -> String {
        let v = self.call("POST", "/element", Some(json!({"using": "css selector", "value": css})));
        v[ELEMENT].as_str().unwrap_or_else(|| panic!("no element {css}: {v}")).to_string()
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css);
        self.call("POST", &format!("/element/{el}/value"), Some(json!({"text": text})));
    }

    /// Replaces the value of a text field.
    pub fn set_field(&self, css: &str, text: &str) {
        let el = self.find(css);
        self.call("POST", &format!("/element/{el}/clear"), None);
        self.call("POST", &format!("/element/{el}/value"), Some(json!({"text": text})));
    }

    pub fn click(&self, css: &str) {
        let el = self.find(css);
        self.call("POST", &format!("/element/{el}/click"), None);
    }

    /// The element's rendered text (as a user sees it).
    pub fn text(&self, css: &str) -> String {
        let el = self.find(css);
        self.call("GET", &format!("/element/{el}/text"), None).as_str().unwrap_or_default().to_string()
    }

    /// Runs `script` (a function body) in the page; its return value.
    pub fn js(&self, script: &str) -> Value {
        self.call("POST", "/execute/sync", Some(json!({"script": script, "args": []})))
    }

    /// Polls `script` until it returns `true`.
    pub fn wait_for(&self, what: &str, timeout: Duration, script: &str) {
        let t0 = Instant::now();
        while self.js(script) != Value::Bool(true) {
            assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The text of an open alert dialog, if any.
    pub fn alert_text(&self) -> Option<String> {
        let resp = self.agent.get(format!("{}/alert/text", self.session)).call().ok()?;
        (resp.status().as_u16() == 200).then(|| format!("{:?}", resp.into_body().read_to_string()))
    }

    /// Saves a PNG of the window.
    pub fn screenshot(&self, to: &Path) {
        use base64::Engine as _;
        let b64 = self.call("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD.decode(b64.as_str().expect("base64")).expect("PNG");
        std::fs::write(to, png).unwrap_or_else(|e| panic!("write {}: {e}", to.display()));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if self.session.contains("/session/") {
            let _ = self.agent.delete(&self.session).call();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
