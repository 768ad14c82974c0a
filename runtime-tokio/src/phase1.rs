//! `a2acp phase1`: the agent's Phase-1 id and one message sent with the seed's retries.

use std::process::ExitCode;

use a2acp_runtime::home::Home;

use crate::client::*;

/// The Phase-1 id of the agent of `home`, if it has an identity key.
pub(crate) fn phase1_own_id(
    home: &Home,
) -> Result<Option<a2acp_core::bridge::phase1::envelope::Uuid>, String> {
    if !home.key().exists() {
        return Ok(None);
    }
    let key = a2acp_runtime::keys::load(&home.key()).map_err(|e| e.to_string())?;
    Ok(Some(a2acp_core::bridge::phase1::envelope::agent_id_of(
        &key.public().to_bytes(),
    )))
}

/// `a2acp phase1 send`: one message, the seed's retries, each attempt on stderr, the
/// receiver's answer on stdout.
pub(crate) async fn phase1_send(
    home: &Home,
    url: String,
    to: &str,
    kind: &str,
    payload: &str,
    from: Option<&str>,
    token: Option<String>,
) -> Result<ExitCode, String> {
    use a2acp_core::bridge::phase1::envelope::Uuid;
    use a2acp_core::bridge::phase1::sender::{self, Event, Outcome, Sender, SenderConfig};
    use a2acp_runtime::phase1_sender::{self, Progress, SendOptions};
    let v4 = |flag: &str, s: &str| -> Result<Uuid, String> {
        a2acp_core::bridge::phase1::envelope::uuid_v4_of(s)
            .ok_or_else(|| format!("{flag} `{s}` is not a UUID v4 (8-4-4-4-12 hex digits)"))
    };
    let to = v4("--to", to)?;
    sender::endpoint(&url).map_err(|e| e.to_string())?;
    let payload = serde_json::Value::Object(read_object("--payload", payload)?);
    let seed = a2acp_runtime::os_seed().map_err(|e| e.to_string())?;
    let mut rng = a2acp_core::rng::DetRng::from_seed(seed);
    let (from, random) = match from {
        Some(f) => (v4("--from", f)?, false),
        None => match phase1_own_id(home)? {
            Some(id) => (id, false),
            None => (sender::message_id(&mut rng), true),
        },
    };
    let now = a2acp_runtime::now();
    let message = sender::compose(kind, payload, from, to, sender::message_id(&mut rng), now)
        .map_err(|e| format!("this message would be refused: {e}"))?;
    let s = Sender::new(&message, now, SenderConfig::default())
        .map_err(|e| format!("this message would be refused: {e}"))?;
    if random {
        eprintln!(
            "from: {from} (a random id: no agent in {})",
            home.dir().display()
        );
    }
    eprintln!(
        "sending {} {} from {from} to {to}",
        message.payload.type_name(),
        message.message_id
    );
    let opts = SendOptions { token };
    let outcome = tokio::task::spawn_blocking(move || {
        phase1_sender::send(&url, s, &opts, |p| match p {
            Progress::Attempt {
                attempt,
                ack_deadline,
            } => eprintln!(
                "attempt {attempt}: POST, waiting up to {} s for the acknowledgement",
                ack_deadline.as_secs_f64()
            ),
            Progress::Event(Event::AttemptFailed {
                attempt,
                failure,
                retry_in,
            }) => match retry_in {
                Some(w) => eprintln!(
                    "attempt {attempt} failed: {failure}; next attempt in {} s",
                    w.as_secs_f64()
                ),
                None => eprintln!("attempt {attempt} failed: {failure}"),
            },
        })
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())?;
    use std::io::Write;
    let answer = match &outcome {
        Outcome::Acknowledged { answer, .. } => answer.as_deref(),
        Outcome::Refused { answer, .. } => Some(&**answer),
        _ => None,
    };
    if let Some(a) = answer {
        let _ = writeln!(
            std::io::stdout().lock(),
            "{}",
            serde_json::to_string_pretty(&a.to_json()).unwrap_or_default()
        );
    }
    eprintln!("{outcome}");
    Ok(match outcome {
        Outcome::Acknowledged { .. } => ExitCode::SUCCESS,
        Outcome::Refused { .. } => ExitCode::from(2),
        Outcome::GaveUp { .. } => ExitCode::from(3),
        Outcome::Failed { .. } => ExitCode::from(4),
    })
}
