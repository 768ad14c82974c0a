//! What a process uses, from `/proc`: CPU time by kind of thread, resident memory.

use std::collections::HashMap;
use std::time::Instant;

/// CPU time spent during a measurement (from `/proc`; Linux only, zero elsewhere).
#[derive(Debug, Clone, Default)]
pub struct CpuUse {
    /// Seconds measured.
    pub secs: f64,
    /// The server process's CPU seconds by kind of thread.
    pub server: Vec<(&'static str, f64)>,
    /// The load generator's (this process's) CPU seconds.
    pub generator: f64,
}

impl CpuUse {
    /// The server's CPU seconds.
    pub fn server_total(&self) -> f64 {
        self.server.iter().map(|(_, s)| s).sum()
    }

    /// The server's CPU time per delivered message, µs.
    pub fn server_us_per(&self, delivered: u64) -> f64 {
        1e6 * self.server_total() / delivered.max(1) as f64
    }

    pub(super) fn line(&self, delivered: u64, what: &str) -> String {
        let secs = self.secs.max(1e-9);
        let parts: Vec<String> = self
            .server
            .iter()
            .filter(|(_, s)| *s > 0.0)
            .map(|(k, s)| format!("{k} {:.2}", s / secs))
            .collect();
        format!(
            "CPU: {:.2} cores ({}) = {:.1} µs per {what}; load generator {:.2} cores",
            self.server_total() / secs,
            parts.join(" · "),
            self.server_us_per(delivered),
            self.generator / secs
        )
    }
}

/// Clock ticks per second of `/proc/*/stat` (USER_HZ: 100 on every Linux ABI a2acp runs on).
pub(crate) const USER_HZ: f64 = 100.0;

/// The CPU seconds of each thread of `pid` (`None`: this process) and its kind, by thread id.
fn cpu_by_thread(pid: Option<u32>) -> HashMap<String, (&'static str, f64)> {
    let mut m = HashMap::new();
    let dir = match pid {
        Some(p) => format!("/proc/{p}/task"),
        None => "/proc/self/task".to_string(),
    };
    let Ok(tasks) = std::fs::read_dir(dir) else {
        return m;
    };
    for t in tasks.flatten() {
        let tid = t.file_name().to_string_lossy().into_owned();
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: comm may hold spaces, the fields after it do not.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        let secs = (ticks(11) + ticks(12)) as f64 / USER_HZ;
        let kind = if comm.starts_with("tokio-rt") {
            "I/O"
        } else if comm.starts_with("a2acp-verify") {
            "verify"
        } else if comm == "a2acp-relay" {
            "state machine"
        } else if comm == "a2acp-commit" {
            "commit"
        } else {
            "other"
        };
        m.insert(tid, (kind, secs));
    }
    m
}

/// CPU seconds by kind of thread since `start` (threads that ended meanwhile, such as
/// an idle blocking-pool thread, are left out rather than counted negative).
fn cpu_since(
    start: &HashMap<String, (&'static str, f64)>,
    now: &HashMap<String, (&'static str, f64)>,
) -> HashMap<&'static str, f64> {
    let mut m = HashMap::new();
    for (tid, (kind, secs)) in now {
        let before = start.get(tid).map_or(0.0, |x| x.1);
        *m.entry(*kind).or_insert(0.0) += (secs - before).max(0.0);
    }
    m
}

/// CPU samples at the start of a measurement.
pub(super) struct CpuMark {
    at: Instant,
    server: HashMap<String, (&'static str, f64)>,
    generator: HashMap<String, (&'static str, f64)>,
    pid: u32,
}

impl CpuMark {
    pub(super) fn new(pid: u32) -> Self {
        CpuMark {
            at: Instant::now(),
            server: cpu_by_thread(Some(pid)),
            generator: cpu_by_thread(None),
            pid,
        }
    }

    pub(super) fn since(&self) -> CpuUse {
        let server = cpu_since(&self.server, &cpu_by_thread(Some(self.pid)));
        let generator = cpu_since(&self.generator, &cpu_by_thread(None));
        CpuUse {
            secs: self.at.elapsed().as_secs_f64(),
            server: ["I/O", "verify", "state machine", "commit", "other"]
                .iter()
                .filter_map(|k| server.get(k).map(|s| (*k, *s)))
                .filter(|(_, s)| *s > 0.0)
                .collect(),
            generator: generator.values().sum(),
        }
    }
}

pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
