//! A small W3C WebDriver client: the consent page's tests drive a real headless Chromium
//! through `chromedriver` (Debian's `chromium` and `chromium-driver`, installed by
//! `.ci/chromium`), started by the test and stopped by its PID.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::KilledOnDrop;

/// `chromedriver` running on a port of its own, killed when dropped.
pub struct Driver {
    _child: KilledOnDrop,
    url: String,
}

impl Driver {
    /// Starts `chromedriver` and waits until it answers.
    pub fn start() -> Driver {
        let port = crate::federation::free_port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (install it with `bash .ci/chromium`)");
        let d = Driver {
            _child: KilledOnDrop(child),
            url: format!("http://127.0.0.1:{port}"),
        };
        let end = Instant::now() + Duration::from_secs(20);
        while http().get(format!("{}/status", d.url)).call().is_err() {
            assert!(Instant::now() < end, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        d
    }

    /// A new headless Chromium window of `width`×`height` CSS pixels.
    pub fn browser(&self, width: u32, height: u32) -> Browser {
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                         "--disable-gpu", "--hide-scrollbars",
                         format!("--window-size={width},{height}")]
            }
        }}});
        let v = post(&format!("{}/session", self.url), &caps);
        let id = v["sessionId"].as_str().expect("a session").to_string();
        let b = Browser {
            base: format!("{}/session/{id}", self.url),
        };
        b.resize(width, height);
        b
    }
}

fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

fn read(mut r: ureq::http::Response<ureq::Body>) -> Value {
    let text = r.body_mut().read_to_string().unwrap_or_default();
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let v = v.get("value").cloned().unwrap_or(Value::Null);
    assert!(
        v.get("error").is_none(),
        "WebDriver: {}",
        v["message"].as_str().unwrap_or(&text)
    );
    v
}

fn post(url: &str, body: &Value) -> Value {
    read(
        http()
            .post(url)
            .header("content-type", "application/json")
            .send(body.to_string())
            .expect("WebDriver answers"),
    )
}

/// One browser window (a WebDriver session).
pub struct Browser {
    base: String,
}

impl Browser {
    /// Opens `url`.
    pub fn goto(&self, url: &str) {
        post(&format!("{}/url", self.base), &json!({ "url": url }));
    }

    /// Runs `js` in the page (a function body: `return …`), with `arguments`.
    pub fn script(&self, js: &str, args: Value) -> Value {
        post(
            &format!("{}/execute/sync", self.base),
            &json!({"script": js, "args": args}),
        )
    }

    /// Runs asynchronous `js` (its last argument is the callback).
    pub fn script_async(&self, js: &str, args: Value) -> Value {
        post(
            &format!("{}/execute/async", self.base),
            &json!({"script": js, "args": args}),
        )
    }

    /// Clicks the first element matching `css` (a real click, through WebDriver).
    pub fn click(&self, css: &str) {
        let e = post(
            &format!("{}/element", self.base),
            &json!({"using": "css selector", "value": css}),
        );
        let id = e
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .expect("an element")
            .to_string();
        post(&format!("{}/element/{id}/click", self.base), &json!({}));
    }

    /// How many elements match `css`.
    pub fn count(&self, css: &str) -> usize {
        self.script(
            "return document.querySelectorAll(arguments[0]).length;",
            json!([css]),
        )
        .as_u64()
        .unwrap_or(0) as usize
    }

    /// The text of the first element matching `css` ("" if none).
    pub fn text(&self, css: &str) -> String {
        self.script(
            "var e = document.querySelector(arguments[0]); return e ? e.innerText : '';",
            json!([css]),
        )
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// Waits up to `secs` seconds for `css` to match an element.
    pub fn wait_for(&self, css: &str, secs: u64) {
        let end = Instant::now() + Duration::from_secs(secs);
        while self.count(css) == 0 {
            assert!(
                Instant::now() < end,
                "no `{css}` on the page after {secs} s: {}",
                self.text("body")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits up to `secs` seconds until the page's text contains `text`.
    pub fn wait_text(&self, css: &str, text: &str, secs: u64) {
        let end = Instant::now() + Duration::from_secs(secs);
        while !self.text(css).contains(text) {
            assert!(
                Instant::now() < end,
                "no `{text}` in `{css}` after {secs} s: {}",
                self.text("body")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sets the window's size.
    pub fn resize(&self, width: u32, height: u32) {
        post(
            &format!("{}/window/rect", self.base),
            &json!({"width": width, "height": height}),
        );
    }

    /// Writes a PNG screenshot of the window to `path`.
    pub fn screenshot(&self, path: &Path) {
        use base64::Engine;
        let v = read(
            http()
                .get(format!("{}/screenshot", self.base))
                .call()
                .expect("WebDriver answers"),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .expect("a PNG in base64");
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = http().delete(&self.base).call();
    }
}
