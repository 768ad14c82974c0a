//! `a2acp agent recovery-key` and `a2acp agent recover` (SPEC-NOTES "Recovery").

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use a2acp_core::encoding::b64_encode;
use a2acp_core::Address;
use a2acp_runtime::agent_host::AgentHost;
use a2acp_runtime::config::RelayUrls;
use a2acp_runtime::control::{Request, StatusInfo};
use a2acp_runtime::home::Home;
use a2acp_runtime::recovery::{self, RecoverError};
use a2acp_runtime::store::Durability;
use a2acp_tokio::agent;

/// `agent recovery-key`: a new recovery key, given to the running agent (or recorded in
/// the home of an agent that does not run), then shown once.
pub(crate) async fn recovery_key(home: &Home, qr: bool, json: bool) -> Result<ExitCode, String> {
    let key = recovery::new_recovery_key().map_err(|e| e.to_string())?;
    let public = b64_encode(&key.public);
    let (address, bound, seq) = if tokio::net::UnixStream::connect(home.socket()).await.is_ok() {
        let r = agent::control_request(
            &home.socket(),
            &Request::RecoveryKey {
                recovery_key: public.clone(),
            },
        )
        .await?;
        if !r.ok {
            return Err(r
                .error
                .unwrap_or_else(|| "the agent refused the recovery key".into()));
        }
        // The relay's confirmation, a moment later when the agent is online.
        let mut last = None;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline {
            let s = agent::control_request(&home.socket(), &Request::Status).await?;
            let s: StatusInfo = serde_json::from_value(s.data).map_err(|e| e.to_string())?;
            let done = s
                .recovery
                .as_ref()
                .is_some_and(|r| r.key == public && (r.bound || r.refused.is_some()));
            let online = s.online;
            last = Some(s);
            if done || !online {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let s = last.ok_or("the agent did not answer")?;
        if let Some(why) = s
            .recovery
            .as_ref()
            .filter(|r| r.key == public)
            .and_then(|r| r.refused.clone())
        {
            return Err(format!(
                "the relay refused the new recovery key ({why}); no words were made that could recover this address there"
            ));
        }
        let (bound, seq) = s
            .recovery
            .filter(|r| r.key == public)
            .map_or((false, 0), |r| (r.bound, r.seq));
        (s.address, bound, seq)
    } else {
        let mut opened = AgentHost::open_home(home, Durability::Full).map_err(|e| {
            format!("{e} (if the agent runs, its control socket does not answer: try again)")
        })?;
        recovery::bind(&mut opened.host, key.public).map_err(|e| e.to_string())?;
        let seq = opened
            .host
            .agent()
            .recovery_key_state()
            .map_or(0, |r| r.seq);
        (opened.host.agent().address().to_string(), false, seq)
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "address": address,
                "words": key.words,
                "key": public,
                "seq": seq,
                "bound": bound,
            })
        );
        return Ok(ExitCode::SUCCESS);
    }
    let addr = Address::parse(&address).map_err(|e| e.to_string())?;
    println!(
        "{}",
        match bound {
            true => format!("A new recovery key for {address} is bound at the relay (binding {seq}); the words you had before no longer work."),
            false => format!("A new recovery key for {address} is recorded (binding {seq}); the agent binds it at the relay when it is next online, and until then the words you had before still work."),
        }
    );
    println!();
    print!("{}", recovery::render_words(&key.words, &addr, qr));
    Ok(ExitCode::SUCCESS)
}

/// The words from stdin (a prompt on a terminal): lines until 24 words or the end.
fn read_words() -> Result<String, String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("Your 24 recovery words: ");
        let _ = std::io::stderr().flush();
    }
    let mut all = String::new();
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| format!("reading the words: {e}"))?;
        all.push_str(&line);
        all.push(' ');
        if all.split_whitespace().count() >= recovery::words::WORDS {
            break;
        }
    }
    Ok(all)
}

/// `agent recover`.
pub(crate) async fn recover(
    home: &Home,
    address: &str,
    words: Option<String>,
    relay: Vec<String>,
    ca: Option<&Path>,
    json: bool,
) -> Result<ExitCode, String> {
    let words = match words {
        Some(w) => w,
        None => read_words()?,
    };
    let relay = match relay.is_empty() {
        true => None,
        false => Some(RelayUrls::new(relay).map_err(|e| format!("--relay: {e}"))?),
    };
    let done = a2acp_tokio::recovery::recover(home, address, &words, relay, ca).await;
    match (done, json) {
        (Ok(r), true) => {
            println!("{}", r.to_json());
            Ok(ExitCode::SUCCESS)
        }
        (Ok(r), false) => {
            println!(
                "Recovered {} onto a new identity key ({}) in {}.",
                r.address,
                r.key,
                r.home.display()
            );
            println!("  Your contacts' agents halt the threads they had with you and ask their person to check: tell them, and compare safety numbers (`a2acp keys show ADDRESS` on both sides) before they run `a2acp keys accept`.");
            println!("  Your recovery words stay valid (they are bound again with the new key when the agent connects); `a2acp agent recovery-key` makes new ones.");
            println!("next: a2acp agent run --home {}", r.home.display());
            Ok(ExitCode::SUCCESS)
        }
        (Err(e), true) => {
            let state = match &e {
                RecoverError::Refused { .. } => "refused",
                RecoverError::Unanswered(_) => "unanswered",
                _ => "failed",
            };
            println!(
                "{}",
                serde_json::json!({
                    "state": state,
                    "reason": e.reason(),
                    "message": e.to_string(),
                    "retry_after": e.retry_after(),
                })
            );
            Ok(ExitCode::FAILURE)
        }
        (Err(e), false) => Err(e.to_string()),
    }
}
