//! The commands that talk to a running agent over its control socket.

use std::process::ExitCode;

use a2acp_runtime::control::{self, Request, Response};
use a2acp_runtime::home::Home;
use a2acp_tokio::agent::{self};

use crate::cli::*;

/// `--context`: a JSON object inline (starting with `{`) or the path of a file holding one.
fn read_context(arg: &str) -> Result<a2acp_core::packet::Context, String> {
    read_object("--context", arg)
}

/// A flag's JSON object: inline (starting with `{`) or the path of a file holding one.
pub(crate) fn read_object(
    flag: &str,
    arg: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let (text, what) = if arg.trim_start().starts_with('{') {
        (arg.to_string(), format!("{flag} (inline JSON)"))
    } else {
        let text = std::fs::read_to_string(arg).map_err(|e| {
            format!("{flag} {arg}: {e} (give a path to a JSON file, e.g. examples/dinner.json, or a JSON object inline)")
        })?;
        (text, format!("{flag} {arg}"))
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(format!(
            "{what}: must be a JSON object ({{\"field\": value, …}})"
        )),
        Err(e) => Err(format!("{what}: not JSON: {e}")),
    }
}

pub(crate) fn no_agent(home: &Home) -> String {
    format!(
        "no agent in {} (create one with `a2acp agent init … --home DIR`)",
        home.dir().display()
    )
}

/// A response whose data is a sentence.
fn text(r: &Response) -> String {
    r.data.as_str().unwrap_or("done").to_string()
}

fn notifications(r: &Response, all: bool) -> String {
    serde_json::from_value::<Vec<control::NotificationEntry>>(r.data.clone())
        .map(|d| control::render_notifications(&d, all))
        .unwrap_or_default()
}

fn key(r: &Response, qr: bool) -> String {
    serde_json::from_value::<control::KeyInfo>(r.data.clone())
        .map(|d| control::render_key(&d, qr))
        .unwrap_or_default()
}

pub(crate) async fn client(home: &Home, cmd: Cmd) -> Result<ExitCode, String> {
    if let Cmd::Receipts {
        cmd:
            Some(ReceiptsCmd::Verify {
                file,
                key,
                values,
                signers,
            }),
        ..
    } = &cmd
    {
        // Offline: no agent needed.
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let opts = a2acp_runtime::receipts::VerifyOptions {
            key: key.clone(),
            values: values.clone(),
            signers: signers.clone(),
        };
        return match a2acp_runtime::receipts::verify(&text, &opts) {
            Ok(report) => {
                println!("{report}");
                Ok(ExitCode::SUCCESS)
            }
            Err(report) => {
                println!("{report}");
                Ok(ExitCode::FAILURE)
            }
        };
    }
    if let Cmd::Memory(MemoryCmd::Export { address, out }) = &cmd {
        // The NDJSON goes out byte for byte (it is the backup), not through the
        // terminal's escaping.
        let req = Request::MemoryExport {
            address: address.clone(),
        };
        let resp = agent::control_request(&home.socket(), &req).await?;
        if !resp.ok {
            return Err(resp
                .error
                .unwrap_or_else(|| "the agent refused the export".into()));
        }
        let text = resp.data.as_str().unwrap_or_default();
        match out {
            Some(path) => std::fs::write(path, text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?,
            None => {
                use std::io::Write;
                let _ = std::io::stdout().lock().write_all(text.as_bytes());
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Cmd::Keys(KeysCmd::Rotate { json }) = &cmd {
        return keys_rotate(home, *json).await;
    }
    let (req, json, render): (Request, bool, fn(&Response) -> String) = match cmd {
        Cmd::Thread(ThreadCmd::Start {
            to,
            category,
            summary,
            context,
            urgent,
            quorum,
            sequential,
        }) => {
            let context = match context {
                Some(arg) => Some(read_context(&arg)?),
                None => None,
            };
            (
                Request::StartThread {
                    to: control::Recipients::from_list(to),
                    category,
                    summary,
                    context,
                    urgent,
                    quorum,
                    sequential,
                },
                false,
                |r| {
                    if r.data["group_id"].is_string() {
                        return control::render_group_started(&r.data);
                    }
                    let id = r.data["thread_id"].as_str().unwrap_or("?");
                    match r.data["relay"].as_str() {
                        _ if r.data["declined"].is_string() => format!(
                            "no agent is registered at the relay as your recipient: thread {} is declined and goes on as thread {id} with its A2A agent {} (your config's a2a_cards; follow it with `a2acp threads`)",
                            r.data["declined"].as_str().unwrap_or("?"),
                            r.data["peer"].as_str().unwrap_or("?")
                        ),
                        _ if r.data["a2a"] == true => format!(
                            "thread {id} started with the A2A agent {}: your agent reads its card and drives the task (follow it with `a2acp threads`)",
                            r.data["peer"].as_str().unwrap_or("?")
                        ),
                        Some("accepted") => format!(
                            "thread {id} started: the relay accepted its first packet (follow it with `a2acp threads`)"
                        ),
                        _ if r.data["online"] == false => format!(
                            "thread {id} started; the agent is offline: its first packet goes when the relay is reachable (`a2acp status`)"
                        ),
                        _ => format!(
                            "thread {id} started; the relay has not accepted its first packet yet (follow it with `a2acp threads`)"
                        ),
                    }
                },
            )
        }
        Cmd::Thread(ThreadCmd::Reply {
            id,
            values,
            context,
        }) => {
            let mut c = match context.as_deref() {
                Some(arg) => read_context(arg)?,
                None => a2acp_core::packet::Context::new(),
            };
            c.extend(control::parse_values(&values)?);
            if c.is_empty() {
                return Err(
                    "give the new context: FIELD=VALUE words or --context FILE (a JSON object)"
                        .into(),
                );
            }
            (Request::ReplyThread { id, context: c }, false, text)
        }
        Cmd::Thread(ThreadCmd::Cancel { id }) => (Request::CancelThread { id }, false, text),
        Cmd::Thread(ThreadCmd::Retract { id, fields }) => {
            (Request::Retract { id, fields }, false, text)
        }
        Cmd::Thread(ThreadCmd::UpdateIntent {
            id,
            summary,
            category,
            reason,
            needs,
        }) => (
            Request::UpdateIntent {
                id,
                summary,
                category,
                reason,
                needs,
            },
            false,
            text,
        ),
        Cmd::Thread(ThreadCmd::Fork {
            id,
            intents,
            category,
        }) => (
            Request::ForkThread {
                id,
                intents,
                category,
            },
            false,
            text,
        ),
        Cmd::Thread(ThreadCmd::Transfer { id, to }) => {
            (Request::TransferCoordinator { id, to }, false, text)
        }
        Cmd::Notifications {
            cmd: Some(NotificationsCmd::Read { number, all }),
            ..
        } => (Request::ReadNotifications { number, all }, false, text),
        Cmd::Notifications {
            cmd: None,
            all,
            json,
        } => (
            Request::Notifications { all },
            json,
            if all {
                |r: &Response| notifications(r, true)
            } else {
                |r: &Response| notifications(r, false)
            },
        ),
        Cmd::Keys(KeysCmd::Show {
            address,
            no_qr,
            json,
        }) => (
            Request::KeyShow { address },
            json,
            if no_qr {
                |r: &Response| key(r, false)
            } else {
                |r: &Response| key(r, true)
            },
        ),
        Cmd::Keys(KeysCmd::Accept {
            address,
            safety_number,
        }) => (
            Request::KeyAccept {
                address,
                safety_number,
            },
            false,
            text,
        ),
        Cmd::Thread(ThreadCmd::Show { id, json }) => (Request::Thread { id }, json, |r| {
            // A group's answer names the group itself (`group.group_id` = `id`).
            if r.data["group"]["group_id"] == r.data["id"] {
                return serde_json::from_value(r.data.clone())
                    .map(|d| control::render_group(&d))
                    .unwrap_or_default();
            }
            serde_json::from_value(r.data.clone())
                .map(|d| control::render_thread(&d))
                .unwrap_or_default()
        }),
        Cmd::Threads { json } => (Request::Threads, json, |r| {
            serde_json::from_value::<Vec<control::ThreadSummary>>(r.data.clone())
                .map(|d| control::render_threads(&d))
                .unwrap_or_default()
        }),
        Cmd::Prompts { json } => (Request::Prompts, json, |r| {
            let v: Vec<control::PromptEntry> =
                serde_json::from_value(r.data.clone()).unwrap_or_default();
            if v.is_empty() {
                "no open prompts".into()
            } else {
                v.iter()
                    .map(|p| {
                        format!(
                            "{}\n   {}",
                            a2acp_runtime::prompt::render_in(&p.prompt, p.group.as_ref()),
                            a2acp_runtime::prompt::help(&p.prompt)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        }),
        Cmd::Answer { prompt_id, choice } => (
            Request::Answer {
                prompt_id,
                args: choice,
            },
            false,
            |r| r.data.as_str().unwrap_or("answered").to_string(),
        ),
        Cmd::Permissions(PermCmd::Show { json }) => (Request::Permissions, json, permissions_text),
        Cmd::Permissions(PermCmd::Set {
            field,
            tier,
            for_peer,
        }) => (
            Request::SetPermission {
                field,
                tier,
                for_peer,
            },
            false,
            permissions_text,
        ),
        Cmd::Permissions(PermCmd::Rule {
            field,
            purpose,
            expires_after,
            no_reshare,
            clear,
        }) => (
            Request::SetUsageRule {
                field,
                purpose,
                expires_after,
                no_reshare,
                clear,
            },
            false,
            permissions_text,
        ),
        Cmd::Block { address } => (Request::Block { address }, false, |r| {
            r.data.as_str().unwrap_or("").to_string()
        }),
        Cmd::Unblock { address } => (Request::Unblock { address }, false, |r| {
            r.data.as_str().unwrap_or("").to_string()
        }),
        Cmd::Memory(MemoryCmd::Show { address, json }) => {
            (Request::Memory { address }, json, |r| {
                serde_json::from_value::<Vec<control::PeerMemory>>(r.data.clone())
                    .map(|d| control::render_memory(&d))
                    .unwrap_or_default()
            })
        }
        Cmd::Space(SpaceCmd::Create {
            name,
            with,
            context,
            json,
        }) => {
            let participants = with
                .iter()
                .map(String::as_str)
                .map(control::SpaceMember::parse)
                .collect::<Result<Vec<_>, _>>()?;
            let fields = match context {
                Some(arg) => Some(read_context(&arg)?),
                None => None,
            };
            (
                Request::SpaceCreate {
                    name,
                    participants,
                    fields,
                },
                json,
                |r| {
                    serde_json::from_value::<control::SpaceView>(r.data.clone())
                        .map(|d| format!("space created:\n{}", control::render_space(&d)))
                        .unwrap_or_default()
                },
            )
        }
        Cmd::Space(SpaceCmd::Show { id, json }) => {
            let many = id.is_none();
            (
                Request::SpaceShow { id },
                json,
                if many {
                    |r: &Response| {
                        serde_json::from_value::<Vec<control::SpaceView>>(r.data.clone())
                            .map(|d| control::render_spaces(&d))
                            .unwrap_or_default()
                    }
                } else {
                    |r: &Response| {
                        serde_json::from_value::<control::SpaceView>(r.data.clone())
                            .map(|d| control::render_space(&d))
                            .unwrap_or_default()
                    }
                },
            )
        }
        Cmd::Space(SpaceCmd::Set {
            id,
            field,
            value,
            link,
            title,
        }) => (
            Request::SpaceSet {
                id,
                field,
                value: value.map(|v| a2acp_core::agent::space::value_from_text(&v)),
                link,
                title,
            },
            false,
            text,
        ),
        Cmd::Memory(MemoryCmd::Edit {
            address,
            field,
            value,
        }) => (
            Request::MemoryEdit {
                address,
                field,
                value,
            },
            false,
            text,
        ),
        Cmd::Space(SpaceCmd::History { id, json }) => (Request::SpaceHistory { id }, json, |r| {
            serde_json::from_value::<Vec<control::SpaceFieldLine>>(r.data.clone())
                .map(|d| control::render_space_history(&d))
                .unwrap_or_default()
        }),
        Cmd::Memory(MemoryCmd::Forget { address, field }) => {
            (Request::MemoryForget { address, field }, false, text)
        }
        Cmd::Memory(MemoryCmd::Import { file }) => {
            let ndjson = std::fs::read_to_string(&file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            (Request::MemoryImport { ndjson }, false, text)
        }
        Cmd::Receipts {
            cmd: None,
            thread,
            json,
        } => (Request::Receipts { thread }, json, |r| {
            serde_json::from_value::<Vec<a2acp_core::receipt::StoredReceipt>>(r.data.clone())
                .map(|d| a2acp_runtime::receipts::render(&d))
                .unwrap_or_default()
        }),
        Cmd::Agreements { thread, json } => (Request::Agreements { thread }, json, |r| {
            serde_json::from_value::<Vec<a2acp_core::receipt::agreement::Agreement>>(r.data.clone())
                .map(|d| a2acp_runtime::receipts::render_agreements(&d))
                .unwrap_or_default()
        }),
        Cmd::Retractions { thread, json } => (Request::Retractions { thread }, json, |r| {
            serde_json::from_value::<Vec<a2acp_core::receipt::retraction::Retraction>>(
                r.data.clone(),
            )
            .map(|d| a2acp_runtime::receipts::render_retractions(&d))
            .unwrap_or_default()
        }),
        Cmd::Suggestions { cmd: None, json } => (Request::Suggestions, json, |r| {
            serde_json::from_value::<Vec<a2acp_core::agent::Suggestion>>(r.data.clone())
                .map(|d| control::render_suggestions(&d))
                .unwrap_or_default()
        }),
        Cmd::Suggestions {
            cmd: Some(SuggestionsCmd::Accept { id }),
            ..
        } => (Request::AcceptSuggestion { id }, false, |r| {
            r.data.as_str().unwrap_or("accepted").to_string()
        }),
        Cmd::Suggestions {
            cmd: Some(SuggestionsCmd::Dismiss { id }),
            ..
        } => (Request::DismissSuggestion { id }, false, |r| {
            r.data.as_str().unwrap_or("dismissed").to_string()
        }),
        Cmd::Status { json } => (Request::Status, json, |r| {
            serde_json::from_value::<control::StatusInfo>(r.data.clone())
                .map(|s| control::render_status(&s))
                .unwrap_or_default()
        }),
        _ => return Err("unsupported command".into()),
    };
    let resp = agent::control_request(&home.socket(), &req).await?;
    if !resp.ok {
        return Err(resp
            .error
            .unwrap_or_else(|| "the agent refused the request".into()));
    }
    // A closed stdout (`a2acp prompts | head`) ends the output, not the process with a
    // panic.
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&resp.data).unwrap_or_default()
        );
    } else {
        // Threads, memory and prompts quote what peers wrote: no control, escape or
        // invisible character reaches the terminal (SPEC-NOTES "Prompts and peer text on
        // screen").
        let text = render(&resp);
        let _ = writeln!(out, "{}", a2acp_core::display::lines(&text, usize::MAX));
    }
    Ok(ExitCode::SUCCESS)
}

/// `keys rotate`: waits for the relay's answer and prints it (the JSON of the answer with
/// `--json`, a refusal included, then a non-zero exit code for it).
async fn keys_rotate(home: &Home, json: bool) -> Result<ExitCode, String> {
    let resp = agent::control_request(&home.socket(), &Request::KeyRotate).await?;
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if json && resp.data.is_object() {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&resp.data).unwrap_or_default()
        );
        return Ok(if resp.ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    if !resp.ok {
        return Err(resp
            .error
            .unwrap_or_else(|| "the agent refused the rotation".into()));
    }
    let _ = writeln!(out, "{}", control::render_rotation(&resp.data));
    Ok(ExitCode::SUCCESS)
}

/// The tiers, overrides and rules of a `permissions` answer, as a person reads them.
fn permissions_text(r: &Response) -> String {
    serde_json::from_value(r.data.clone())
        .map(|d| control::render_permissions(&d))
        .unwrap_or_default()
}
