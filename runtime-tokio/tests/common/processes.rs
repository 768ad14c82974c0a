//! What the tests of the real binary share: child processes killed when a test ends,
//! waiting for a condition, and a relay started on a free port.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Child processes killed when the test ends, whatever happens.
pub struct Kids(pub Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `f` polled every 100 ms until it gives a value; panics naming `what` after `secs`.
pub fn until<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `bin relay` on 127.0.0.1 (a free port, domain `localhost`, its data in `data`), kept
/// in `kids`; returns the `ws://` URL it prints.
pub fn start_relay(bin: &str, data: &Path, kids: &mut Kids) -> String {
    let mut relay = Command::new(bin)
        .args(["relay", "--listen", "127.0.0.1:0", "--domain", "localhost"])
        .arg("--data")
        .arg(data)
        .args(["--sync", "normal"])
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(relay.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    kids.0.push(relay);
    line.split_whitespace()
        .find(|w| w.starts_with("ws://"))
        .unwrap_or_else(|| panic!("{line}"))
        .to_string()
}
