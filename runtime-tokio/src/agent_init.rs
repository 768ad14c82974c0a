//! `a2acp agent init`: the agent's home, its key, its configuration, the onboarding.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use a2acp_core::Address;
use a2acp_runtime::agent_host::AgentHost;
use a2acp_runtime::config::{AgentFile, RelayUrls};
use a2acp_runtime::control::{self, Request};
use a2acp_runtime::home::Home;
use a2acp_runtime::recovery;
use a2acp_runtime::store::Durability;
use a2acp_tokio::agent::{self, RunOptions};

/// How `agent init` reports: with a recovery key (`--no-recovery` to skip it), its QR
/// code, and JSON for scripts.
pub(crate) struct InitOutput {
    pub(crate) recovery: bool,
    pub(crate) qr: bool,
    pub(crate) json: bool,
}

/// The relay `agent init` is given: its URL (or URLs, its doors) and, for a private CA,
/// the CA's file.
pub(crate) struct RelayTarget {
    pub(crate) urls: RelayUrls,
    pub(crate) ca: Option<PathBuf>,
}

// The flags of `agent init` and the onboarding's answers, one argument each.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn agent_init(
    home: &Home,
    address: &str,
    target: &RelayTarget,
    name: Option<String>,
    timezone: Option<String>,
    profile: Option<PathBuf>,
    offline: bool,
    onboarded: Option<a2acp_runtime::onboarding::Onboarding>,
    out: InitOutput,
) -> Result<ExitCode, String> {
    let json = out.json;
    let say = |line: String| {
        if !json {
            println!("{line}");
        }
    };
    let addr = Address::parse(address).map_err(|e| format!("--address `{address}`: {e}"))?;
    let relay = &target.urls;
    if addr.to_string() != address {
        // Addresses are case-insensitive and kept in lower case (SPEC-NOTES, addresses):
        // the one you create is the one you give others, so it is spelled as stored.
        return Err(format!(
            "--address `{address}`: addresses are lower case; use `{addr}`"
        ));
    }
    RelayUrls::new(relay.urls().to_vec())?;
    // The CA file is checked (and made absolute, so the home may be moved) before anything
    // is written.
    let ca = match &target.ca {
        Some(p) => {
            let abs = std::fs::canonicalize(p).map_err(|e| format!("--ca {}: {e}", p.display()))?;
            a2acp_runtime::tls::ClientTls::new(Some(&abs)).map_err(|e| e.to_string())?;
            if !relay
                .urls()
                .iter()
                .any(|u| a2acp_runtime::config::relay_is_tls(u))
            {
                return Err(format!("--ca is for a wss:// relay; {relay}: plain ws://"));
            }
            Some(abs)
        }
        None => None,
    };
    if home.config().exists() {
        return Err(format!(
            "{} already holds an agent ({}); use another --home",
            home.dir().display(),
            home.config().display()
        ));
    }
    let mut table = toml::Table::new();
    if let Some(p) = &profile {
        let text =
            std::fs::read_to_string(p).map_err(|e| format!("--profile {}: {e}", p.display()))?;
        table = text
            .parse::<toml::Table>()
            .map_err(|e| format!("--profile {}: {e}", p.display()))?;
    }
    if let Some(n) = name {
        table.insert("name".into(), n.into());
    }
    if let Some(t) = timezone {
        table.insert("timezone".into(), t.into());
    }
    if let Some(o) = &onboarded {
        table.insert("name".into(), o.name.clone().into());
        table.insert("timezone".into(), o.timezone.clone().into());
        if let Some(a) = &o.area {
            table.insert("general_area".into(), a.clone().into());
        }
    }
    // What this command creates, removed again if the relay refuses the address.
    let made_dir = !home.dir().exists();
    std::fs::create_dir_all(home.dir()).map_err(|e| format!("{}: {e}", home.dir().display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(home.dir(), std::fs::Permissions::from_mode(0o700));
    }
    let key = a2acp_runtime::keys::create(&home.key()).map_err(|e| e.to_string())?;
    let mut file = AgentFile::new(&addr, relay, table);
    file.relay_ca = ca.map(|p| p.display().to_string());
    if let Some(o) = onboarded {
        file.permissions = o.permissions;
    }
    file.write_new(&home.config()).map_err(|e| e.to_string())?;
    say(format!("created {addr} in {}", home.dir().display()));
    say(format!(
        "  identity key  {} (public {})",
        home.key().display(),
        key.public()
    ));
    say(format!("  config        {} (onboarding defaults: ask first for everything except timezone and general area)", home.config().display()));
    // The recovery key: its secret is shown at the end and never written; the agent gets
    // its public part and binds it when it registers.
    let recovery = match out.recovery {
        true => Some(recovery::new_recovery_key().map_err(|e| e.to_string())?),
        false => None,
    };
    let mut report = serde_json::json!({
        "address": addr.to_string(),
        "home": home.dir().display().to_string(),
        "key": key.public().to_string(),
    });
    let show_recovery = |report: &mut serde_json::Value, bound: Result<bool, &str>| {
        let Some(r) = &recovery else {
            say(
                "  recovery key  none (--no-recovery; make one with `a2acp agent recovery-key`)"
                    .into(),
            );
            return;
        };
        report["recovery"] = serde_json::json!({
            "words": r.words,
            "key": a2acp_core::encoding::b64_encode(&r.public),
            "bound": bound == Ok(true),
        });
        if let Err(why) = bound {
            report["recovery"]["refused"] = why.into();
        }
        say(match bound {
            Ok(true) => "  recovery key  bound at the relay".into(),
            Ok(false) => "  recovery key  bound at the relay on the first `a2acp agent run`".into(),
            Err(why) => format!(
                "  recovery key  NOT bound: the relay refused it ({why}); these words cannot recover the address at this relay"
            ),
        });
        say(String::new());
        say(recovery::render_words(&r.words, &addr, out.qr));
    };
    if offline {
        if let Some(r) = &recovery {
            let mut opened =
                AgentHost::open_home(home, Durability::Full).map_err(|e| e.to_string())?;
            recovery::bind(&mut opened.host, r.public).map_err(|e| e.to_string())?;
        }
        say("  registration  on the first `a2acp agent run`".into());
        report["registered"] = false.into();
        show_recovery(&mut report, Ok(false));
        if json {
            println!("{report}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut opened = AgentHost::open_home(home, Durability::Full).map_err(|e| e.to_string())?;
    if let Some(r) = &recovery {
        recovery::bind(&mut opened.host, r.public).map_err(|e| e.to_string())?;
    }
    let tls = opened.tls.clone();
    let mut options = RunOptions::new(relay, addr.user());
    options.tls = tls.clone();
    let h = agent::spawn(opened.host, opened.effects, options).map_err(|e| e.to_string())?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut registered = false;
    let mut bound = recovery.is_none();
    let mut refused: Option<control::RefusedInfo> = None;
    let mut binding_refused: Option<String> = None;
    let mut door = None;
    while tokio::time::Instant::now() < deadline
        && !(registered && (bound || binding_refused.is_some()))
        && refused.is_none()
    {
        if let Ok(r) = h.request(Request::Status).await {
            if let Ok(s) = serde_json::from_value::<control::StatusInfo>(r.data) {
                registered = s.online;
                refused = s.refused;
                door = s.door;
                bound = bound || s.recovery.as_ref().is_some_and(|r| r.bound);
                binding_refused = s.recovery.and_then(|r| r.refused);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = h.stop().await;
    match (registered, refused) {
        (true, _) => {
            say(format!(
                "  registered    with {}",
                door.as_deref().unwrap_or(relay.first())
            ));
            report["registered"] = true.into();
            let state = match &binding_refused {
                Some(why) => Err(why.as_str()),
                None => Ok(bound && recovery.is_some()),
            };
            show_recovery(&mut report, state);
        }
        (false, Some(r)) => {
            // Nothing of a home the relay refused stays behind.
            let agentic = home.dir().join(a2acp_runtime::agentic::DB_FILE);
            for f in [home.key(), home.config(), home.db(), agentic] {
                let _ = std::fs::remove_file(&f);
                for ext in ["-wal", "-shm", "-journal"] {
                    let mut p = f.clone().into_os_string();
                    p.push(ext);
                    let _ = std::fs::remove_file(PathBuf::from(p));
                }
            }
            if made_dir {
                let _ = std::fs::remove_dir(home.dir());
            }
            let advice = match r.code.as_str() {
                "address_taken" => "another agent holds this address at the relay; choose another --address",
                "registration_limited" => "too many new addresses were registered from this network lately; try again in an hour",
                _ => "check --address (its domain must be the relay's) and --relay",
            };
            return Err(format!(
                "the relay refused to register {addr} ({}: {}): {advice}. Nothing was created in {}.",
                r.code,
                r.message,
                home.dir().display()
            ));
        }
        (false, None) => {
            // Why, in one more attempt per door: e.g. a wss:// relay whose certificate
            // is not trusted.
            let mut why = Vec::new();
            for url in relay.urls() {
                if let Err(e) = a2acp_tokio::ws::connect_with(url, tls.as_ref()).await {
                    why.push(e.to_string());
                }
            }
            let why = match why.is_empty() {
                true => String::new(),
                false => format!(" ({})", why.join("; ")),
            };
            say(format!(
                "  registration  {relay} not reachable now{why}; it happens on the first `a2acp agent run`"
            ));
            report["registered"] = false.into();
            show_recovery(&mut report, Ok(false));
        }
    }
    say(format!(
        "next: a2acp agent run --home {}",
        home.dir().display()
    ));
    if json {
        println!("{report}");
    }
    Ok(ExitCode::SUCCESS)
}
