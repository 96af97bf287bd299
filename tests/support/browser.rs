//! Headless Chromium for the dashboard's browser test, driven over the DevTools protocol (CDP):
//! JSON messages over the WebSocket that Chromium opens on 127.0.0.1, enough of it to open a
//! page, run a script in it, wait for a condition and take a screenshot.
//!
//! A crate that wraps the whole protocol (chromiumoxide, headless_chrome) compiles the
//! protocol's generated types, minutes of build on a small machine for the handful of calls
//! used here; the calls are written out here instead.
//!
//! Chromium is found at `$CHROMIUM`, else `/usr/bin/chromium` (Debian's package), else
//! `chromium`, `chromium-browser` or `google-chrome` on `PATH`. When there is none,
//! [`Chromium::find`] returns `None` and prints a skip note, except under `CI=true`, where it
//! panics: CI must run the browser test, not skip it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long Chromium may take to start and open its DevTools port.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one protocol call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What to tell a person who has no Chromium.
pub const INSTALL_HINT: &str = "install it with `apt-get install -y chromium` (or set CHROMIUM to its path)";

/// A headless Chromium with one page open, killed when dropped.
pub struct Chromium {
    child: Child,
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// The page's session (calls to the page carry it).
    session: String,
    next_id: u64,
    /// Dropped last: the browser is killed before its profile goes.
    profile: tempfile::TempDir,
}

impl Chromium {
    /// The browser's path, or `None` with a skip note when there is none (a panic under
    /// `CI=true`).
    pub fn find() -> Option<PathBuf> {
        let found = std::env::var_os("CHROMIUM").map(PathBuf::from).or_else(|| {
            let debian = PathBuf::from("/usr/bin/chromium");
            if debian.is_file() {
                return Some(debian);
            }
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path)
                .flat_map(|dir| ["chromium", "chromium-browser", "google-chrome"].map(|name| dir.join(name)))
                .find(|p| p.is_file())
        });
        match found {
            Some(path) => Some(path),
            None if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
                panic!("Chromium not found and CI=true: the dashboard's browser test needs it; {INSTALL_HINT}")
            }
            None => {
                eprintln!("Chromium not found ({INSTALL_HINT}): skipping the browser test");
                None
            }
        }
    }

    /// Starts `binary` headless with a new profile, a `width` x `height` window and one empty
    /// page, and connects to it. Panics if it does not come up.
    pub async fn launch(binary: &Path, width: u32, height: u32) -> Chromium {
        let profile = tempfile::Builder::new().prefix("timewheel-chromium-").tempdir().expect("a profile dir");
        let log = std::fs::File::create(profile.path().join("chromium.log")).expect("a log file");
        // The flags that keep a headless Chromium off the network (it calls Google's services at
        // start otherwise) and quiet; no sandbox, since tests often run as root.
        let child = Command::new(binary)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--disable-default-apps",
                "--hide-scrollbars",
                "--mute-audio",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                &format!("--window-size={width},{height}"),
                &format!("--user-data-dir={}", profile.path().display()),
                "about:blank",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            // A process group of its own, so that its renderers and helpers go with it.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let mut starting = Starting(Some(child));
        let url = starting.devtools_url(profile.path()).await;
        let (ws, _) = tokio_tungstenite::connect_async(url.as_str()).await.expect("connect to the DevTools socket");
        let child = starting.0.take().expect("running");
        let mut chromium = Chromium { child, ws, session: String::new(), next_id: 0, profile };
        let target = chromium.call(None, "Target.createTarget", json!({ "url": "about:blank" })).await;
        let target = target["targetId"].as_str().expect("a target id").to_owned();
        let attached =
            chromium.call(None, "Target.attachToTarget", json!({ "targetId": target, "flatten": true })).await;
        chromium.session = attached["sessionId"].as_str().expect("a session id").to_owned();
        chromium.page("Page.enable", json!({})).await;
        let metrics = json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false });
        chromium.page("Emulation.setDeviceMetricsOverride", metrics).await;
        chromium
    }

    /// Opens `url` in the page and waits until it has loaded (its scripts may still be fetching
    /// what they show: wait for that with [`wait_for`](Self::wait_for)).
    pub async fn goto(&mut self, url: &str) {
        let reply = self.page("Page.navigate", json!({ "url": url })).await;
        if let Some(error) = reply.get("errorText") {
            panic!("navigating to {url}: {error}");
        }
        // The page may have put its own place in the fragment (`#...`) by then.
        let loaded = format!("location.href.split('#')[0] === {url:?} && document.readyState === 'complete'");
        if self.wait_for(&loaded, START_TIMEOUT).await.is_none() {
            let at = self.eval("location.href + ' (' + document.readyState + ')'").await;
            panic!(
                "{url} did not load within {START_TIMEOUT:?}: the page is at {at}; Chromium's log:\n{}",
                self.log_tail()
            );
        }
    }

    /// Runs `expression` in the page (awaiting it if it is a promise) and returns its value.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let params = json!({ "expression": expression, "returnByValue": true, "awaitPromise": true });
        let reply = self.page("Runtime.evaluate", params).await;
        if let Some(error) = reply.get("exceptionDetails") {
            panic!("the page threw on {expression}: {error}");
        }
        reply["result"].get("value").cloned().unwrap_or(Value::Null)
    }

    /// Evaluates `expression` every 50 ms until it is neither `null`, `undefined` nor `false`,
    /// and returns that value; `None` after `timeout`.
    pub async fn wait_for(&mut self, expression: &str, timeout: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let value = self.eval(expression).await;
            if !matches!(value, Value::Null | Value::Bool(false)) {
                return Some(value);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Gives the page a `width` x `height` window, as a phone's (`mobile`: its viewport rules
    /// and touch) or a desktop's.
    pub async fn resize(&mut self, width: u32, height: u32, mobile: bool) {
        let metrics = json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile });
        self.page("Emulation.setDeviceMetricsOverride", metrics).await;
    }

    /// A PNG of the whole page, as tall as its content.
    pub async fn screenshot(&mut self) -> Vec<u8> {
        let width = self.eval("document.documentElement.clientWidth").await.as_u64().unwrap_or(1280);
        let height = self.eval("document.documentElement.scrollHeight").await.as_u64().unwrap_or(1000).min(4000);
        let metrics = json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false });
        self.page("Emulation.setDeviceMetricsOverride", metrics).await;
        let shot = self.page("Page.captureScreenshot", json!({ "format": "png" })).await;
        let data = shot["data"].as_str().expect("screenshot data");
        base64::engine::general_purpose::STANDARD.decode(data).expect("base64 PNG")
    }

    /// The last lines Chromium wrote to its log, for failure messages.
    pub fn log_tail(&self) -> String {
        log_tail(self.profile.path())
    }

    async fn page(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.call(Some(&session), method, params).await
    }

    /// Sends one call and waits for its answer, passing over the events meanwhile.
    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let exchange = async {
            self.ws.send(Message::Text(message.to_string().into())).await.expect("send to Chromium");
            while let Some(frame) = self.ws.next().await {
                let text = match frame.expect("read from Chromium") {
                    Message::Text(text) => text,
                    Message::Close(_) => break,
                    _ => continue,
                };
                let reply: Value = serde_json::from_str(text.as_str()).expect("CDP sends JSON");
                if reply["id"].as_u64() != Some(id) {
                    continue;
                }
                if let Some(error) = reply.get("error") {
                    return Err(format!("{method}: {error}"));
                }
                return Ok(reply["result"].clone());
            }
            Err(format!("{method}: Chromium closed the connection"))
        };
        match tokio::time::timeout(CALL_TIMEOUT, exchange).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => panic!("{e}; Chromium's log:\n{}", self.log_tail()),
            Err(_) => panic!("{method}: no answer within {CALL_TIMEOUT:?}; Chromium's log:\n{}", self.log_tail()),
        }
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        kill_group(&mut self.child);
    }
}

/// Kills Chromium and every process of its group (renderers, helpers, which would otherwise
/// outlive it for a moment and write into the profile while it is removed), and reaps it.
fn kill_group(child: &mut Child) {
    let group = format!("-{}", child.id());
    let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
    let _ = child.kill();
    let _ = child.wait();
}

/// A Chromium that has not opened its DevTools port yet: killed if the wait fails.
struct Starting(Option<Child>);

impl Starting {
    /// Waits for the file in `profile` in which Chromium writes its DevTools port and path.
    async fn devtools_url(&mut self, profile: &Path) -> String {
        let file = profile.join("DevToolsActivePort");
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    return format!("ws://127.0.0.1:{port}{path}");
                }
            }
            let child = self.0.as_mut().expect("running");
            if let Ok(Some(status)) = child.try_wait() {
                panic!("Chromium exited with {status}; its log:\n{}", log_tail(profile));
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("Chromium opened no DevTools port in {START_TIMEOUT:?}; its log:\n{}", log_tail(profile));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            kill_group(&mut child);
        }
    }
}

fn log_tail(profile: &Path) -> String {
    let log = std::fs::read_to_string(profile.join("chromium.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
