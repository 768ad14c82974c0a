//! `relay --tls-cert/--tls-key` of a real relay binary (shared by `a2acp` and `a2acp-smol`):
//! unusable files stop it at start with an error naming the file and a non-zero exit (no
//! panic, no data directory created); usable ones make it print a `wss://` listening line
//! and answer `/healthz` over https.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use a2acp_runtime::tls::ClientTls;
use futures_util::io::{AsyncReadExt, AsyncWriteExt};

/// The tests every relay binary runs, as `bad_tls_files_are_named` and
/// `relay_serves_https`: `relay_tls_tests!(env!("CARGO_BIN_EXE_…"))` (the module declared
/// with `#[macro_use]`).
macro_rules! relay_tls_tests {
    ($bin:expr) => {
        #[test]
        fn bad_tls_files_are_named() {
            tls_cli::bad_files_are_named($bin);
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn relay_serves_https() {
            tls_cli::serves_https($bin).await;
        }
    };
}

/// A private CA and a relay certificate for `localhost` in `dir`, as `a2acp dev-ca` makes
/// them (ca.pem, relay.pem, relay.key).
fn write_pki(dir: &Path) {
    a2acp_runtime::dev_ca::make(dir, &["localhost".to_string()]).expect("a private CA");
}

/// Runs `bin relay` with `args` to its end: (exit code, stderr).
fn relay_fails(bin: &str, data: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(bin)
        .args(["relay", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn bad_files_are_named(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    let data = dir.path().join("data");
    let p = |f: &str| dir.path().join(f).display().to_string();
    for (cert, key, named) in [
        (p("missing.pem"), p("relay.key"), "missing.pem"),
        (p("relay.pem"), p("missing.key"), "missing.key"),
        (p("relay.key"), p("relay.key"), "relay.key"),
        (p("relay.pem"), p("relay.pem"), "relay.pem"),
    ] {
        let (code, err) = relay_fails(bin, &data, &["--tls-cert", &cert, "--tls-key", &key]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains(named) && err.starts_with("error: "), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            !data.exists(),
            "nothing created before the files are checked"
        );
    }
    let (code, err) = relay_fails(bin, &data, &["--tls-cert", &p("relay.pem")]);
    assert_eq!(
        code,
        Some(2),
        "clap: --tls-key is required with --tls-cert: {err}"
    );
    assert!(err.contains("--tls-key"), "{err}");
}

pub async fn serves_https(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    let (mut child, port) = spawn_tls_relay(bin, dir.path());
    let addr = format!("127.0.0.1:{port}");
    let tls = ClientTls::new(Some(&dir.path().join("ca.pem"))).unwrap();
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut s = tls
        .connect(
            "localhost",
            async_tungstenite::tokio::TokioAdapter::new(tcp),
        )
        .await
        .unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    s.flush().await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let _ = child.kill();
    let _ = child.wait();
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
}

/// Starts `bin relay` on 127.0.0.1 serving TLS with the PKI of `dir`: the child and the
/// port of the `wss://` URL it prints.
fn spawn_tls_relay(bin: &str, dir: &Path) -> (std::process::Child, u16) {
    let mut child = Command::new(bin)
        .args(["relay", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.join("data"))
        .arg("--tls-cert")
        .arg(dir.join("relay.pem"))
        .arg("--tls-key")
        .arg(dir.join("relay.key"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("wss://"))
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("a wss:// listening line: {line}"));
    (child, port)
}

/// `a2acp agent init --relay wss://… --ca FILE` against a relay with a private CA:
/// without `--ca` the registration is put off with the TLS reason; with it the agent
/// registers and `config.toml` names the CA file (absolute) as `relay_ca`.
#[allow(dead_code)] // used by the tokio binary's tests only (`agent init` is an `a2acp` command)
pub fn agent_init_with_ca(relay_bin: &str, a2acp: &str) {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    let (mut relay, port) = spawn_tls_relay(relay_bin, dir.path());
    let url = format!("wss://localhost:{port}");
    let init = |name: &str, ca: Option<&Path>| {
        let mut c = Command::new(a2acp);
        c.args(["agent", "init", "--address"])
            .arg(format!("agent:{name}@localhost"))
            .args(["--relay", &url, "--home"])
            .arg(dir.path().join(name));
        if let Some(ca) = ca {
            c.arg("--ca").arg(ca);
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = init("bob", None);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("not reachable now") && out.contains("TLS handshake") && out.contains("--ca"),
        "{out}"
    );
    let (code, out) = init("alice", Some(&dir.path().join("ca.pem")));
    let _ = relay.kill();
    let _ = relay.wait();
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("registered"), "{out}");
    let config = std::fs::read_to_string(dir.path().join("alice/config.toml")).unwrap();
    let ca = std::fs::canonicalize(dir.path().join("ca.pem")).unwrap();
    assert!(
        config.contains(&format!("relay_ca = \"{}\"", ca.display())),
        "{config}"
    );
}
