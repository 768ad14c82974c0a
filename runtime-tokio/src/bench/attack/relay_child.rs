//! The relay under attack: a child process, what it uses, its HTTP endpoints.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};
use tokio::process::{Child, Command};

use crate::bench::BenchError;

use super::*;

/// What a process uses, from `/proc` (zero where there is none).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Open file descriptors.
    pub fds: usize,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// CPU seconds since it started.
    pub cpu_secs: f64,
}

impl Usage {
    /// What process `pid` uses now.
    pub fn of(pid: u32) -> Usage {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0);
        let cpu_secs = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let close = stat.rfind(')')?;
                let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
                let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
                Some((ticks(11)? + ticks(12)?) as f64 / crate::bench::USER_HZ)
            })
            .unwrap_or(0.0);
        Usage {
            fds,
            rss_kib: crate::bench::rss_kib(pid).unwrap_or(0),
            cpu_secs,
        }
    }
}

/// A relay running as a child process, its data in a temporary directory, its log
/// (stderr) counted.
#[derive(Debug)]
pub struct RelayChild {
    child: Child,
    /// Its process id.
    pub pid: u32,
    /// Where it listens.
    pub addr: SocketAddr,
    /// `ws://addr`.
    pub url: String,
    log_bytes: Arc<AtomicU64>,
    _dir: tempfile::TempDir,
}

impl RelayChild {
    /// Starts `exe relay` on a free loopback port under `ulimit -n fd_limit` (through
    /// `sh`, as the limit must be set in the child), with `flags` added.
    pub async fn spawn(exe: &Path, fd_limit: u64, flags: &[String]) -> Result<Self, BenchError> {
        let dir = tempfile::Builder::new()
            .prefix("a2acp-attack-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let data = dir.path().join("relay").display().to_string();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {fd_limit} && exec \"$0\" \"$@\""))
            .arg(exe)
            .args(["relay", "--listen", "127.0.0.1:0", "--domain", "localhost"])
            .args(["--data", &data, "--sync", "normal"])
            .args(flags)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        let pid = child.id().ok_or("the relay exited at once")?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(out).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .map_err(|_| "the relay did not start in 20 s".to_string())?
            .map_err(|e| e.to_string())?
            .ok_or("the relay exited before listening")?;
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("ws://"))
            .ok_or_else(|| format!("unexpected first line `{line}`"))?
            .to_string();
        let addr: SocketAddr = url["ws://".len()..]
            .parse()
            .map_err(|e| format!("`{url}`: {e}"))?;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let log_bytes = Arc::new(AtomicU64::new(0));
        if let Some(mut err) = child.stderr.take() {
            let n = log_bytes.clone();
            tokio::spawn(async move {
                let mut b = vec![0u8; 16 * 1024];
                while let Ok(k) = err.read(&mut b).await {
                    if k == 0 {
                        break;
                    }
                    n.fetch_add(k as u64, Ordering::Relaxed);
                }
            });
        }
        Ok(RelayChild {
            child,
            pid,
            addr,
            url,
            log_bytes,
            _dir: dir,
        })
    }

    /// What it uses now.
    pub fn usage(&self) -> Usage {
        Usage::of(self.pid)
    }

    /// Bytes it has logged so far.
    pub fn log_bytes(&self) -> u64 {
        self.log_bytes.load(Ordering::Relaxed)
    }

    /// `/metrics`, parsed: `name value` per line (comments left out).
    pub async fn metrics(&self) -> Result<Vec<(String, f64)>, BenchError> {
        let (body, _) = http_get(self.addr, "/metrics", Duration::from_secs(5)).await?;
        Ok(body
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect())
    }

    /// Stops it (SIGKILL) and waits for it.
    pub async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// One metric of a parsed `/metrics` (0 if absent).
pub fn metric(m: &[(String, f64)], name: &str) -> f64 {
    m.iter().find(|(k, _)| k == name).map_or(0.0, |(_, v)| *v)
}

/// `GET path` from [`HONEST_IP`]: the body if the answer is `200`, and how long it took.
pub async fn http_get(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(String, Duration), BenchError> {
    let t = Instant::now();
    let fut = async {
        let mut s = connect_from(IpAddr::V4(HONEST_IP), addr).await?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: relay\r\n\r\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out).into_owned();
        if !text.starts_with("HTTP/1.1 200") {
            return Err(format!(
                "GET {path}: {}",
                text.lines().next().unwrap_or("no answer")
            ));
        }
        Ok(text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default())
    };
    let body = tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| format!("GET {path}: no answer in {} ms", timeout.as_millis()))??;
    Ok((body, t.elapsed()))
}

pub(super) async fn connect_from(ip: IpAddr, to: SocketAddr) -> Result<TcpStream, BenchError> {
    let sock = TcpSocket::new_v4().map_err(|e| e.to_string())?;
    sock.bind(SocketAddr::new(ip, 0))
        .map_err(|e| format!("bind {ip}: {e}"))?;
    sock.connect(to).await.map_err(|e| e.to_string())
}
