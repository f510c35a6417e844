//! Just enough of the W3C WebDriver protocol to drive headless Chromium through
//! chromedriver: JSON over HTTP/1.1 on loopback, one connection per command. Written out
//! rather than taken from a crate because the handful of commands the console test needs
//! fit in this file, and a WebDriver crate would bring its own HTTP and TLS stack to build.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

/// The key of an element reference in WebDriver's JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long `wait_for` waits by default.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A WebDriver error: its `error` code (`no such alert`, `unexpected alert open`, …) and
/// message.
#[derive(Debug)]
pub struct WdError {
    pub code: String,
    /// Shown by `Debug` when a test fails on it.
    #[allow(dead_code)]
    pub message: String,
}

/// `chromedriver` and `chromium` on the PATH, or `None` (the test is then skipped).
pub fn find_browser() -> Option<(PathBuf, PathBuf)> {
    let driver = which("chromedriver")?;
    let browser = which("chromium").or_else(|| which("chromium-browser"))?;
    Some((driver, browser))
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A chromedriver process and one browser session; both end on drop.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium session in it.
    pub fn start(driver: &Path, browser: &Path, log: &Path) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("chromedriver starts");
        let mut browser_handle = Browser {
            driver: child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            session: String::new(),
        };
        let deadline = Instant::now() + PATIENCE;
        while browser_handle.http("GET", "/status", None).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            // An alert the page opened is left open, so the next command fails with
            // `unexpected alert open` and `alert_text` finds it: nothing dismisses it quietly.
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": {
                "binary": browser.to_string_lossy(),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1000"],
            },
        }}});
        let created = browser_handle
            .http("POST", "/session", Some(&capabilities))
            .expect("a browser session");
        browser_handle.session = created["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned();
        browser_handle
    }

    /// A command of this session.
    pub fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, WdError> {
        let body = body.or_else(|| (method == "POST").then(|| json!({})));
        self.http(
            method,
            &format!("/session/{}{path}", self.session),
            body.as_ref(),
        )
    }

    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })))
            .expect("navigate");
    }

    /// The elements matching a CSS selector now (possibly none).
    pub fn find_all(&self, css: &str) -> Vec<String> {
        let found = self
            .cmd(
                "POST",
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .expect("find elements");
        found
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first element matching `css`, waiting up to `PATIENCE` for it to appear.
    pub fn wait_for(&self, css: &str) -> String {
        self.wait_until(&format!("an element {css}"), || {
            self.find_all(css).into_iter().next()
        })
    }

    /// Polls `check` until it returns something, or fails the test after `PATIENCE`.
    pub fn wait_until<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(value) = check() {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn click(&self, element: &str) {
        self.cmd("POST", &format!("/element/{element}/click"), None)
            .expect("click");
    }

    pub fn type_text(&self, element: &str, text: &str) {
        self.cmd(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        )
        .expect("send keys");
    }

    /// An element's rendered text.
    pub fn text(&self, element: &str) -> String {
        self.cmd("GET", &format!("/element/{element}/text"), None)
            .expect("element text")
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Runs `script` (a function body) in the page with `args` and returns its value.
    pub fn script(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .expect("execute script")
    }

    /// The text of an open alert, confirm or prompt; `Err` with `no such alert` when none is.
    pub fn alert_text(&self) -> Result<String, WdError> {
        self.cmd("GET", "/alert/text", None)
            .map(|v| v.as_str().unwrap_or_default().to_owned())
    }

    pub fn set_window(&self, width: u32, height: u32) {
        self.cmd(
            "POST",
            "/window/rect",
            Some(json!({ "width": width, "height": height })),
        )
        .expect("window size");
    }

    /// Saves a PNG of the viewport.
    pub fn screenshot(&self, path: &Path) {
        let encoded = self.cmd("GET", "/screenshot", None).expect("screenshot");
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap_or_default())
            .expect("screenshot is base64");
        std::fs::write(path, png).expect("screenshot written");
    }

    /// One request to chromedriver; the WebDriver `value`, or its error.
    fn http(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, WdError> {
        let io = |e: std::io::Error| WdError {
            code: "io".into(),
            message: e.to_string(),
        };
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut stream = TcpStream::connect(self.addr).map_err(io)?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(io)?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .map_err(io)?;
        let payload = read_reply(&mut stream).map_err(io)?;
        let reply: Value = serde_json::from_str(&payload).map_err(|e| WdError {
            code: "bad reply".into(),
            message: format!("{e}: {payload}"),
        })?;
        let value = reply["value"].clone();
        match value.get("error").and_then(Value::as_str) {
            Some(code) => Err(WdError {
                code: code.to_owned(),
                message: value["message"].as_str().unwrap_or_default().to_owned(),
            }),
            None => Ok(value),
        }
    }
}

/// The body of one HTTP/1.1 response, by its Content-Length: chromedriver keeps the
/// connection open whatever the request says, so reading to the end would wait forever.
fn read_reply(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        raw.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse::<usize>().ok())
        .ok_or_else(|| std::io::Error::other(format!("no content-length in {head:?}")))?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body)?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.http("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
