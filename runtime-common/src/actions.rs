//! Doing what a confirmed resolution says (§8.1, §9): the runtime's side of
//! [`Output::ExecuteAction`](a2acp_core::agent::Output::ExecuteAction).
//!
//! - `add_calendar_event` is built in: it writes the event as an RFC 5545 iCalendar file
//!   (`<home>/calendar/<thread id>.ics`, one event whose UID is `<thread id>@a2acp`),
//!   which calendar applications import; its undo removes the file.
//! - Any action (the built-in one included) can be given to a **command** or a **webhook**
//!   in `config.toml` (`[actions.book_table] command = ["./book.sh"]` or `webhook =
//!   "https://…"`, `timeout_ms`): the action goes as JSON on the command's stdin or as the
//!   POST body; success is exit status 0 or an HTTP 2xx, anything else — a timeout
//!   included — is the action failing, which the core turns into FAILED → ROLLBACK → the
//!   next alternative (§9). An undo is the same call with `"undo": true`; a check
//!   (`"check": true`, §8.3) answers its findings as a JSON object on stdout or in the
//!   response body.
//! - An action nothing is configured for is only recorded (it succeeds), as before.
//!
//! Each action runs on a thread of its own; the results arrive on
//! [`ActionRunner::results`] as the core's [`Input::ActionResult`], which the agent's loop
//! feeds back.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use a2acp_core::agent::{ActionRequest, Input};
use a2acp_core::packet::Context;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The built-in calendar action.
pub const ADD_CALENDAR_EVENT: &str = "add_calendar_event";

/// Default time an external action may take.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// Most bytes read of an external action's output (stdout, stderr, response body).
pub const MAX_OUTPUT_BYTES: u64 = 64 * 1024;

/// Longest error text kept from an external action.
pub const MAX_ERROR_CHARS: usize = 200;

/// How one action is done, from `[actions.<name>]` in `config.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionService {
    /// A program and its arguments, run without a shell; the action as JSON on stdin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A URL the action is POSTed to as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    /// How long it may take, in milliseconds (default 10,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `[actions]` in `config.toml`: one table per action name.
pub type ActionsConfig = BTreeMap<String, ActionService>;

/// Checks the `[actions]` tables: each names exactly one of `command` (non-empty) and
/// `webhook` (an http or https URL).
pub fn check_config(actions: &ActionsConfig) -> Result<(), String> {
    for (name, s) in actions {
        match (&s.command, &s.webhook) {
            (Some(c), None) if !c.is_empty() && !c[0].is_empty() => {}
            (Some(_), None) => return Err(format!("[actions.{name}]: command is empty")),
            (None, Some(u)) if u.starts_with("http://") || u.starts_with("https://") => {}
            (None, Some(u)) => {
                return Err(format!(
                    "[actions.{name}]: webhook must be an http:// or https:// URL, not {u:?}"
                ))
            }
            _ => {
                return Err(format!(
                    "[actions.{name}]: give exactly one of command and webhook"
                ))
            }
        }
        if s.timeout_ms == Some(0) {
            return Err(format!("[actions.{name}]: timeout_ms must be above 0"));
        }
    }
    Ok(())
}

/// Runs actions, each on its own thread.
#[derive(Debug)]
pub struct ActionRunner {
    calendar_dir: PathBuf,
    services: ActionsConfig,
    tx: flume::Sender<Input>,
    rx: flume::Receiver<Input>,
}

impl ActionRunner {
    /// A runner writing calendar events into `calendar_dir` and calling `services`.
    pub fn new(calendar_dir: PathBuf, services: ActionsConfig) -> Self {
        let (tx, rx) = flume::unbounded();
        ActionRunner {
            calendar_dir,
            services,
            tx,
            rx,
        }
    }

    /// Where the results arrive.
    pub fn results(&self) -> flume::Receiver<Input> {
        self.rx.clone()
    }

    /// Starts an action; returns at once.
    pub fn submit(&self, req: ActionRequest) {
        let service = self.services.get(&req.action.action).cloned();
        let calendar_dir = self.calendar_dir.clone();
        let tx = self.tx.clone();
        let id = req.id;
        let spawned = std::thread::Builder::new()
            .name(format!("action-{id}"))
            .spawn(move || {
                let result = run(&req, service.as_ref(), &calendar_dir);
                let _ = tx.send(Input::ActionResult {
                    action_id: req.id,
                    result,
                });
            });
        if let Err(e) = spawned {
            let _ = self.tx.send(Input::ActionResult {
                action_id: id,
                result: Err(format!("cannot start the action: {e}")),
            });
        }
    }
}

/// Does one action (or its undo, or its check), synchronously.
pub fn run(
    req: &ActionRequest,
    service: Option<&ActionService>,
    calendar_dir: &Path,
) -> Result<Context, String> {
    let body = json!({
        "action": req.action.action,
        "service": req.action.service,
        "action_id": req.id,
        "thread_id": req.thread_id,
        "details": req.details,
        "undo": req.undo,
        "check": req.check,
    });
    let timeout = Duration::from_millis(
        service
            .and_then(|s| s.timeout_ms)
            .unwrap_or(DEFAULT_TIMEOUT_MS),
    );
    let out = match service {
        Some(ActionService {
            command: Some(c), ..
        }) => run_command(c, &body, timeout)?,
        Some(ActionService {
            webhook: Some(u), ..
        }) => call_webhook(u, &body, timeout)?,
        _ if req.action.action == ADD_CALENDAR_EVENT => {
            if !req.check {
                calendar_event(req, calendar_dir)?;
            }
            return Ok(Context::new());
        }
        _ => return Ok(Context::new()),
    };
    if !req.check || out.trim().is_empty() {
        return Ok(Context::new());
    }
    match serde_json::from_str::<Value>(&out) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err("the check's answer is not a JSON object".into()),
    }
}

fn short(text: &str) -> String {
    a2acp_core::display::line(text.trim(), MAX_ERROR_CHARS).into_owned()
}

fn run_command(argv: &[String], body: &Value, timeout: Duration) -> Result<String, String> {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", argv[0]))?;
    let input = serde_json::to_vec(body).unwrap_or_default();
    let mut stdin = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            let _ = s.write_all(&input);
        }
    });
    let read = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(r) = r {
                let _ = r.take(MAX_OUTPUT_BYTES).read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let stdout = read(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let stderr = read(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if started.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} did not finish within {} ms",
                    argv[0],
                    timeout.as_millis()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("{}: {e}", argv[0])),
        }
    };
    let _ = writer.join();
    let out = stdout.join().unwrap_or_default();
    let err = stderr.join().unwrap_or_default();
    if status.success() {
        Ok(out)
    } else {
        let why = if err.trim().is_empty() {
            status.to_string()
        } else {
            short(&err)
        };
        Err(format!("{} failed: {why}", argv[0]))
    }
}

fn call_webhook(url: &str, body: &Value, timeout: Duration) -> Result<String, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent
        .post(url)
        .header("content-type", "application/json")
        .send(serde_json::to_vec(body).unwrap_or_default().as_slice())
        .map_err(|e| format!("{url}: {e}"))?;
    let status = r.status().as_u16();
    let text = r
        .body_mut()
        .with_config()
        .limit(MAX_OUTPUT_BYTES)
        .read_to_string()
        .unwrap_or_default();
    if (200..300).contains(&status) {
        Ok(text)
    } else {
        Err(format!("{url} answered HTTP {status}: {}", short(&text)))
    }
}

/// The event's file: the thread id with anything but letters, digits, `_` and `-` left out.
pub fn calendar_file(calendar_dir: &Path, thread_id: &str) -> PathBuf {
    let name: String = thread_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(100)
        .collect();
    calendar_dir.join(format!("{name}.ics"))
}

fn text_of(details: &Context, key: &str) -> Option<String> {
    details
        .get(key)
        .and_then(Value::as_str)
        .map(|s| a2acp_core::display::line(s, 200).into_owned())
}

/// Writes (or, undoing, removes) the thread's calendar event.
fn calendar_event(req: &ActionRequest, calendar_dir: &Path) -> Result<(), String> {
    use icalendar::{Component, EventLike};
    let file = calendar_file(calendar_dir, &req.thread_id);
    if req.undo {
        return match std::fs::remove_file(&file) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("cannot remove {}: {e}", file.display())),
        };
    }
    let d = &req.details;
    let utc = |k: &str| {
        text_of(d, k).and_then(|s| {
            chrono::DateTime::parse_from_rfc3339(&s)
                .ok()
                .map(|t| t.with_timezone(&chrono::Utc))
        })
    };
    let mut event = icalendar::Event::new();
    event.uid(&format!("{}@a2acp", req.thread_id));
    match (utc("start_utc"), utc("end_utc")) {
        (Some(s), Some(e)) if e > s => {
            event.starts(s).ends(e);
        }
        _ => {
            match text_of(d, "date")
                .and_then(|s| chrono::NaiveDate::parse_from_str(&s, "%Y-%m-%d").ok())
            {
                Some(day) => {
                    event.all_day(day);
                }
                None => return Err(
                    "add_calendar_event: the details give no time (start_utc and end_utc, or date)"
                        .into(),
                ),
            }
        }
    }
    let what = text_of(d, "summary")
        .or_else(|| text_of(d, "event_type"))
        .unwrap_or_else(|| "Event".into());
    event.summary(&what);
    if let Some(place) = text_of(d, "venue").or_else(|| text_of(d, "location")) {
        event.location(&place);
    }
    event.description(&format!(
        "Agreed by a2acp (thread {}): {}",
        req.thread_id,
        serde_json::to_string(d).unwrap_or_default()
    ));
    let calendar = icalendar::Calendar::new()
        .name("a2acp")
        .push(event.done())
        .done();
    std::fs::create_dir_all(calendar_dir)
        .map_err(|e| format!("cannot create {}: {e}", calendar_dir.display()))?;
    // Written whole, then renamed: a calendar application never reads half an event.
    let tmp = file.with_extension("ics.tmp");
    std::fs::write(&tmp, calendar.to_string())
        .and_then(|()| std::fs::rename(&tmp, &file))
        .map_err(|e| format!("cannot write {}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2acp_core::packet::ActionSpec;

    fn req(action: &str, details: Value, undo: bool, check: bool) -> ActionRequest {
        ActionRequest {
            id: 7,
            thread_id: "thr_abc/../x".into(),
            action: ActionSpec {
                action: action.into(),
                service: None,
                requires_user_approval: false,
                reversible: true,
                by: None,
            },
            details: details.as_object().cloned().unwrap_or_default(),
            undo,
            check,
        }
    }

    fn dinner() -> Value {
        json!({"event_type": "dinner", "start_utc": "2026-03-20T18:00:00Z",
               "end_utc": "2026-03-20T20:00:00Z", "venue": "Café\u{1b}[31m Roma"})
    }

    #[test]
    fn a_calendar_event_is_written_parsed_back_and_undone() {
        let dir = tempfile::tempdir().unwrap();
        run(
            &req(ADD_CALENDAR_EVENT, dinner(), false, false),
            None,
            dir.path(),
        )
        .unwrap();
        let file = calendar_file(dir.path(), "thr_abc/../x");
        assert_eq!(file.file_name().unwrap(), "thr_abcx.ics");
        let text = std::fs::read_to_string(&file).unwrap();
        let cal: icalendar::Calendar = text.parse().unwrap();
        let ev = cal.components[0].as_event().unwrap();
        use icalendar::{Component, EventLike};
        assert_eq!(ev.get_summary(), Some("dinner"));
        assert_eq!(ev.get_uid(), Some("thr_abc/../x@a2acp"));
        assert!(!ev.get_location().unwrap().contains('\u{1b}'));
        assert!(text.contains("DTSTART:20260320T180000Z"), "{text}");
        assert!(text.contains("DTEND:20260320T200000Z"), "{text}");
        // Again (a restarted agent asks again): the same one file.
        run(
            &req(ADD_CALENDAR_EVENT, dinner(), false, false),
            None,
            dir.path(),
        )
        .unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        run(
            &req(ADD_CALENDAR_EVENT, dinner(), true, false),
            None,
            dir.path(),
        )
        .unwrap();
        assert!(!file.exists());
        // Undoing what is not there is done.
        run(
            &req(ADD_CALENDAR_EVENT, dinner(), true, false),
            None,
            dir.path(),
        )
        .unwrap();
    }

    #[test]
    fn a_calendar_event_without_a_time_fails() {
        let dir = tempfile::tempdir().unwrap();
        let e = run(
            &req(ADD_CALENDAR_EVENT, json!({"venue": "x"}), false, false),
            None,
            dir.path(),
        )
        .unwrap_err();
        assert!(e.contains("no time"), "{e}");
        let all_day = json!({"date": "2026-03-20"});
        run(
            &req(ADD_CALENDAR_EVENT, all_day, false, false),
            None,
            dir.path(),
        )
        .unwrap();
        let text = std::fs::read_to_string(calendar_file(dir.path(), "thr_abcx")).unwrap();
        assert!(text.contains("DTSTART;VALUE=DATE:20260320"), "{text}");
    }

    fn sh(script: &str, timeout_ms: Option<u64>) -> ActionService {
        ActionService {
            command: Some(vec!["sh".into(), "-c".into(), script.into()]),
            webhook: None,
            timeout_ms,
        }
    }

    #[test]
    fn a_command_gets_the_action_on_stdin_and_its_exit_status_decides() {
        let dir = tempfile::tempdir().unwrap();
        let seen = dir.path().join("seen.json");
        let ok = sh(&format!("cat > {}", seen.display()), None);
        run(
            &req("book_table", dinner(), false, false),
            Some(&ok),
            dir.path(),
        )
        .unwrap();
        let body: Value = serde_json::from_slice(&std::fs::read(&seen).unwrap()).unwrap();
        assert_eq!(body["action"], "book_table");
        assert_eq!(body["details"]["event_type"], "dinner");
        assert_eq!(body["undo"], false);
        let fail = sh("echo 'no table left' >&2; exit 3", None);
        let e = run(
            &req("book_table", dinner(), false, false),
            Some(&fail),
            dir.path(),
        )
        .unwrap_err();
        assert_eq!(e, "sh failed: no table left");
        let check = sh("echo '{\"table\": \"window\"}'", None);
        let found = run(
            &req("book_table", dinner(), false, true),
            Some(&check),
            dir.path(),
        )
        .unwrap();
        assert_eq!(found.get("table"), Some(&json!("window")));
        let garbage = sh("echo 'not json'", None);
        assert!(run(
            &req("book_table", dinner(), false, true),
            Some(&garbage),
            dir.path()
        )
        .is_err());
    }

    #[test]
    fn a_command_that_hangs_is_killed_at_its_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let hang = sh("sleep 30", Some(300));
        let started = Instant::now();
        let e = run(
            &req("book_table", dinner(), false, false),
            Some(&hang),
            dir.path(),
        )
        .unwrap_err();
        assert!(e.contains("did not finish within 300 ms"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn the_config_names_one_way_per_action() {
        let mut c = ActionsConfig::new();
        c.insert("a".into(), sh("true", None));
        assert!(check_config(&c).is_ok());
        c.insert("b".into(), ActionService::default());
        assert!(check_config(&c).unwrap_err().contains("exactly one"));
        c.remove("b");
        c.insert(
            "w".into(),
            ActionService {
                webhook: Some("file:///etc/passwd".into()),
                ..Default::default()
            },
        );
        assert!(check_config(&c).unwrap_err().contains("http"));
    }
}
