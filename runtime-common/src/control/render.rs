//! The text the CLI prints from the agent's answers.

use a2acp_core::agent::Suggestion;
use a2acp_core::packet::Context;
use serde_json::Value;

use super::*;

/// Text for `a2acp notifications`.
pub fn render_notifications(ns: &[NotificationEntry], all: bool) -> String {
    if ns.is_empty() {
        return if all {
            "no notifications".into()
        } else {
            "no unread notifications (`a2acp notifications --all` lists the read ones too)".into()
        };
    }
    let mut out = String::new();
    for n in ns {
        let kind = serde_json::to_value(n.notification.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        out += &format!(
            "{:>4}{} {} {:<10} {}\n      {}\n",
            n.number,
            if n.read { " " } else { "*" },
            n.at,
            kind,
            n.notification
                .thread_id
                .as_deref()
                .map(|t| format!("thread {t}"))
                .unwrap_or_default(),
            n.notification.text
        );
    }
    out += "(* unread; `a2acp notifications read N` or `read --all` marks them read)";
    out
}

/// Text for `a2acp keys rotate` (its answer's data): the new key and this agent's half of
/// every safety number, or that the rotation waits for the relay.
pub fn render_rotation(d: &serde_json::Value) -> String {
    let s = |k: &str| d[k].as_str().unwrap_or("?").to_string();
    match d["state"].as_str() {
        Some("rotated") => format!(
            "{} now has a new identity key (rotation {}): {}\nIts half of every safety number: {}\nThe agents you know re-pin it from the statement your old key signed; their safety numbers with you change (compare them again with `a2acp keys show ADDR`).",
            s("address"),
            d["seq"].as_u64().unwrap_or(0),
            s("key"),
            crate::safety::grouped(&s("fingerprint")).replace('\n', " "),
        ),
        _ => format!(
            "the rotation of {} is under way: the relay has not answered yet{}; it finishes when the agent reaches its relay (the old key stays usable until then; see `a2acp notifications`)",
            s("address"),
            if d["online"].as_bool() == Some(false) { " (the agent is offline)" } else { "" },
        ),
    }
}

/// Text for `a2acp keys show`: the digits in 12 groups of 5 and the QR code.
pub fn render_key(k: &KeyInfo, with_qr: bool) -> String {
    let mut out = format!("{} (you): {}\n", k.address, k.key);
    out += &format!(
        "{}: {}\n",
        k.peer,
        k.pinned_key
            .as_deref()
            .unwrap_or("no key pinned yet (pinned on first contact)")
    );
    let number = |title: &str, n: &str, out: &mut String| {
        *out += &format!("\n{title}\n");
        for l in crate::safety::grouped(n).lines() {
            *out += &format!("    {l}\n");
        }
        if with_qr {
            if let Some(q) = crate::safety::qr(n) {
                *out += &q;
                *out += "\n";
            }
        }
    };
    if let (Some(new), Some(n)) = (&k.changed_key, &k.changed_safety_number) {
        out += &format!("\nCHANGED: {} now presents the key {new}\n", k.peer);
        number(
            "Safety number with the NEW key — compare it with the one their device shows (read it out or scan it):",
            n,
            &mut out,
        );
        out += &format!(
            "\nIf both match: a2acp keys accept {} --safety-number \"{}\"\n",
            k.peer, n
        );
    } else if let Some(n) = &k.safety_number {
        number(
            "Safety number — the same 60 digits on both devices if the keys are the ones you both hold:",
            n,
            &mut out,
        );
    }
    out.trim_end().to_string()
}

/// Text for `a2acp status`.
pub fn render_status(s: &StatusInfo) -> String {
    let relay = match &s.refused {
        Some(r) => format!(
            "refused ({}: {}) — {}",
            r.code,
            r.message,
            match r.retry_after_secs {
                Some(n) => format!("the agent tries again in {} min", n.div_ceil(60)),
                None => "the agent stays offline until it is run again".into(),
            }
        ),
        None => match (s.online, &s.door) {
            (true, Some(d)) => format!("online at {d}"),
            (true, None) => "online".into(),
            (false, Some(d)) => format!("offline (reconnecting; last at {d})"),
            (false, None) => "offline (reconnecting)".into(),
        },
    };
    let mut out = format!(
        "{} ({})\n  relay: {}\n  threads: {} ({} open) · prompts: {} · outbox: {}",
        s.address, s.key, relay, s.threads, s.open_threads, s.prompts, s.outbox
    );
    if s.audit_lost > 0 {
        out.push_str(&format!(
            "\n  audit log: {} entr(y/ies) not written — the disk refuses (see the agent's log)",
            s.audit_lost
        ));
    }
    if let Some(t) = &s.transparency {
        out.push_str(&format!(
            "\n  transparency: {} queued · {} delivered · {} dropped · {} failed",
            t.queued, t.delivered, t.dropped, t.failed
        ));
    }
    out.push_str(&match &s.recovery {
        Some(r) if r.bound => format!("\n  recovery key: bound at the relay (binding {})", r.seq),
        Some(r) if r.refused.is_some() => format!(
            "\n  recovery key: REFUSED by the relay ({}); it cannot recover this address there",
            a2acp_core::display::line(r.refused.as_deref().unwrap_or(""), a2acp_core::display::MAX_SHORT)
        ),
        Some(r) => format!(
            "\n  recovery key: not yet confirmed by the relay (binding {}; sent when the agent is online)",
            r.seq
        ),
        None => "\n  recovery key: none (make one with `a2acp agent recovery-key`)".into(),
    });
    out
}

/// Text for `a2acp threads`: one row per thread; a group thread this agent coordinates
/// is one row (its id `grp_…`, how many take part, its state) with its legs beneath it.
pub fn render_threads(ts: &[ThreadSummary]) -> String {
    if ts.is_empty() {
        return "no threads yet — start one with `a2acp thread start --to ADDR --category C --summary S` (repeat --to for a group thread)".into();
    }
    let mut s = format!(
        "{:<22} {:<12} {:<26} {:>3} {:<8} {}\n",
        "THREAD", "STATE", "WITH", "RT", "WAITING", "ABOUT"
    );
    let groups: Vec<&str> = ts
        .iter()
        .filter(|t| t.is_group())
        .map(|t| t.id.as_str())
        .collect();
    let leg_of_listed = |t: &ThreadSummary| {
        !t.is_group()
            && t.group
                .as_ref()
                .is_some_and(|g| groups.contains(&g.group_id.as_str()))
    };
    for t in ts {
        if leg_of_listed(t) {
            continue;
        }
        if t.is_group() {
            let n = t.group.as_ref().map_or(0, |g| g.participants.len());
            s += &format!(
                "{:<22} {:<12} {:<26} {:>3} {:<8} {}: {}\n",
                t.id,
                t.state,
                format!("group: you + {} other(s)", n.saturating_sub(1)),
                t.round_trips,
                t.waiting,
                t.category,
                t.summary
            );
            let legs: Vec<&ThreadSummary> = ts
                .iter()
                .filter(|l| !l.is_group() && l.group.as_ref().is_some_and(|g| g.group_id == t.id))
                .collect();
            for (i, l) in legs.iter().enumerate() {
                let branch = if i + 1 == legs.len() { "└" } else { "├" };
                s += &format!(
                    "{:<22} {:<12} {:<26} {:>3} {:<8} leg of {}\n",
                    format!(" {branch} {}", l.id),
                    l.state,
                    l.peer,
                    l.round_trips,
                    l.waiting,
                    t.id
                );
            }
            continue;
        }
        let group = t
            .group
            .as_ref()
            .map(|g| {
                format!(
                    " (group {} of {}, coordinated by {})",
                    g.group_id,
                    g.participants.len(),
                    user_of(&g.coordinator)
                )
            })
            .unwrap_or_default();
        let split = match (&t.continued_as, t.split_into.is_empty()) {
            (Some(next), _) => format!(" — goes on as {next} (A2A)"),
            (None, true) => String::new(),
            (None, false) => format!(" — split into {}", t.split_into.join(", ")),
        };
        s += &format!(
            "{:<22} {:<12} {:<26} {:>3} {:<8} {}: {}{group}{split}\n",
            t.id,
            t.shown_state(),
            t.peer,
            t.round_trips,
            t.waiting,
            t.category,
            t.summary
        );
    }
    s.trim_end().to_string()
}

/// Text for `a2acp thread show`: state, peer, intent, what each side shared and declined,
/// open prompts, the proposal and the timeline of the thread's main events.
pub fn render_thread(t: &ThreadDetail) -> String {
    let s = &t.summary;
    let mut out = format!("Thread {} — {}\n", s.id, s.shown_state());
    if !s.split_into.is_empty() {
        out += &format!(
            "  split into     {} (it takes no further part; they carry it on)\n",
            s.split_into.join(", ")
        );
    }
    if let Some(next) = &s.continued_as {
        out += &format!(
            "  goes on as     {next} (no a2acp agent holds the address: its A2A agent took it up)\n"
        );
    }
    let row = |out: &mut String, k: &str, v: &str| *out += &format!("  {k:<14} {v}\n");
    row(
        &mut out,
        "with",
        &format!(
            "{} ({} started it)",
            s.peer,
            if s.initiator { "you" } else { "they" }
        ),
    );
    if let Some(g) = &s.group {
        let part = if g.coordinator == s.peer {
            format!(
                "part of group {} coordinated by {} (participants: {})",
                g.group_id,
                g.coordinator,
                g.others("")
            )
        } else {
            format!(
                "leg of your group {} (`a2acp thread show {}`)",
                g.group_id, g.group_id
            )
        };
        row(&mut out, "group", &part);
    }
    row(
        &mut out,
        "about",
        &format!(
            "{}: {}{}",
            s.category,
            s.summary,
            t.urgency
                .as_deref()
                .map(|u| format!(" (urgency {u})"))
                .unwrap_or_default()
        ),
    );
    let waiting = match s.waiting.as_str() {
        "user" => "for you".to_string(),
        "peer" if !s.waiting_for.is_empty() => format!("for {}", s.waiting_for.join(", ")),
        "peer" => "for the other agent".to_string(),
        "llm" => "for the language model".to_string(),
        "nothing" | "" => "for nothing".to_string(),
        w => format!("for {w}"),
    };
    row(
        &mut out,
        "waiting",
        &format!(
            "{waiting} · {} round trip(s) · last activity {}{}",
            s.round_trips,
            s.last_activity,
            t.version
                .as_deref()
                .map(|v| format!(" · protocol {v}"))
                .unwrap_or_default()
        ),
    );
    let fields = |c: &Context| -> String {
        if c.is_empty() {
            return "nothing".into();
        }
        c.iter()
            .map(|(k, v)| match v {
                Value::String(x) => format!("{k}={x}"),
                v => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let list = |l: &[String]| {
        if l.is_empty() {
            "nothing".to_string()
        } else {
            l.join(", ")
        }
    };
    row(&mut out, "you shared", &fields(&t.shared));
    row(&mut out, "you declined", &list(&t.withheld));
    row(&mut out, "they shared", &fields(&t.theirs));
    for (field, rule) in &t.usage {
        row(
            &mut out,
            "their rule",
            &format!("{field}: {}", usage_text(rule)),
        );
    }
    row(&mut out, "they declined", &list(&t.peer_unavailable));
    if let Some(r) = &t.resolution {
        row(&mut out, "proposal", r);
    }
    for r in &t.retractions {
        let how = if r.acknowledged {
            "deleted: they confirmed, signed".to_string()
        } else if r.told {
            format!("NOT CONFIRMED by {}: nothing says it was deleted", s.peer)
        } else {
            "asked; waiting for their signed confirmation".to_string()
        };
        row(
            &mut out,
            "you took back",
            &format!("{} — {how}", r.fields.join(", ")),
        );
    }
    if !t.retracted.is_empty() {
        row(
            &mut out,
            "they took back",
            &format!("{} (deleted here)", t.retracted.join(", ")),
        );
    }
    for (n, p) in &t.prompts {
        row(
            &mut out,
            "open prompt",
            &format!("{p} — `a2acp prompts` shows it, `a2acp answer {n} …` answers it"),
        );
    }
    if t.halted {
        row(
            &mut out,
            "HALTED",
            &format!(
                "the identity key of {} changed: `a2acp keys show {}`",
                s.peer, s.peer
            ),
        );
    } else if t.escalated {
        row(
            &mut out,
            "needs you",
            &format!(
                "give new context or an answer: `a2acp thread reply {} FIELD=VALUE …` (or `a2acp thread cancel {}`)",
                s.id, s.id
            ),
        );
    }
    if !t.audit.is_empty() {
        out += "  timeline:\n";
        for a in &t.audit {
            out += &format!("    {a}\n");
        }
    }
    out.trim_end().to_string()
}

/// Text for `a2acp memory show`.
pub fn render_memory(peers: &[PeerMemory]) -> String {
    let mut out = String::new();
    if peers.is_empty() {
        out += "no agent known yet\n";
    }
    for p in peers {
        out += &format!("{}\n", p.address);
        out += &format!(
            "  identity key: {}\n",
            p.pinned_key.as_deref().unwrap_or("not pinned yet")
        );
        if let Some(r) = &p.relationship {
            out += &format!(
                "  relationship: {} (always share: {}; never share: {})\n",
                if r.label.is_empty() { "-" } else { &r.label },
                join(&r.promote_to_always_share),
                join(&r.restrict_to_never_share)
            );
        }
        if p.blocked {
            out += "  BLOCKED\n";
        }
        if p.flagged {
            out += "  flagged: sends malformed packets\n";
        }
        let r = &p.reputation;
        let mut seen = vec![format!("{} completed thread(s)", r.completed)];
        if r.malformed > 0 {
            seen.push(format!("{} malformed packet(s)", r.malformed));
        }
        if r.refused > 0 {
            seen.push(format!("{} refused past your limits", r.refused));
        }
        if r.key_changed {
            seen.push("a changed key you have not accepted".into());
        }
        out += &format!(
            "  reputation: {:+} {} ({})\n",
            r.score,
            r.word(),
            seen.join(", ")
        );
        let th: Vec<String> = p.threads.iter().map(|(s, n)| format!("{n} {s}")).collect();
        out += &format!(
            "  threads: {}\n",
            if th.is_empty() {
                "none".into()
            } else {
                th.join(", ")
            }
        );
        out += &format!(
            "  they shared: {}\n",
            serde_json::to_string(&p.they_shared).unwrap_or_default()
        );
        out += &format!("  you shared: {}\n", p.we_shared.join(", "));
        out += &render_remembered(p.remembered.as_ref());
    }
    out.trim_end().to_string()
}

/// The relationship memory part of `a2acp memory show` (§11.1).
fn render_remembered(r: Option<&serde_json::Value>) -> String {
    let Some(r) = r else {
        return "  remembered: nothing yet (memory grows with each completed thread)\n".into();
    };
    let s = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    };
    let list = |v: &serde_json::Value| {
        let items: Vec<String> = v
            .as_array()
            .map(|a| a.iter().map(s).collect())
            .unwrap_or_default();
        if items.is_empty() {
            "-".to_string()
        } else {
            items.join(", ")
        }
    };
    let mut out = format!(
        "  remembered: {} completed thread(s), first {}, last {}; trust {} ({})\n",
        s(&r["interaction_count"]),
        s(&r["first_interaction"]),
        s(&r["last_interaction"]),
        s(&r["trust_level"]),
        list(&r["trust_signals"]),
    );
    let lp = &r["learned_patterns"];
    out += &format!(
        "  typical intents: {}; usually shares: {}; usually declines: {}; average response: {}\n",
        list(&r["typical_intents"]),
        list(&lp["usually_shares"]),
        list(&lp["usually_declines"]),
        s(&lp["average_response_time"]),
    );
    if let Some(cache) = r["context_cache"].as_object().filter(|c| !c.is_empty()) {
        out += "  context cache:\n";
        for (field, e) in cache {
            out += &format!(
                "    {field} = {} (updated {}, {})\n",
                s(&e["value"]),
                s(&e["last_updated"]),
                s(&e["confidence"]),
            );
        }
    }
    out
}

pub(super) fn join(s: &std::collections::BTreeSet<String>) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// Text for `a2acp suggestions`.
pub fn render_suggestions(list: &[Suggestion]) -> String {
    if list.is_empty() {
        return "no suggestions".into();
    }
    let mut out = String::new();
    for s in list {
        match s {
            Suggestion::Promote { id, field, peer } => {
                out += &format!("#{id} always share {field} with {peer}\n");
            }
        }
    }
    out += "accept one with `a2acp suggestions accept N`";
    out
}

/// Text for `a2acp permissions show`.
pub fn render_permissions(p: &PermissionsInfo) -> String {
    let mut out = String::new();
    for (tier, list) in &p.tiers {
        out += &format!("{tier}: {}\n", list.join(", "));
    }
    for (a, o) in &p.overrides {
        out += &format!(
            "for {a} ({}): always share {}; never share {}\n",
            if o.label.is_empty() { "-" } else { &o.label },
            join(&o.promote_to_always_share),
            join(&o.restrict_to_never_share)
        );
    }
    if !p.blocked.is_empty() {
        out += &format!("blocked: {}\n", p.blocked.join(", "));
    }
    for (field, r) in &p.usage {
        let mut parts = Vec::new();
        if r.purpose {
            parts.push("only for what the thread is about".to_string());
        }
        if let Some(s) = r.expires_after {
            parts.push(format!("deleted {} after sharing", human_secs(s)));
        }
        if r.no_reshare {
            parts.push("not to be passed on".to_string());
        }
        out += &format!("rule for {field}: {}\n", parts.join("; "));
    }
    out.trim_end().to_string()
}

/// A usage rule as the person reads it (SPEC-NOTES "Usage rules"): "only for scheduling;
/// deleted at 2026-03-23T11:00:00Z; not to be passed on".
pub fn usage_text(rule: &a2acp_core::packet::UsageRule) -> String {
    let mut parts = Vec::new();
    if let Some(p) = &rule.purpose {
        parts.push(format!("only for {}", a2acp_core::display::line(p, 64)));
    }
    if let Some(e) = &rule.expires_at {
        parts.push(format!("deleted at {}", a2acp_core::display::line(e, 40)));
    }
    if rule.no_reshare {
        parts.push("not to be passed on".to_string());
    }
    parts.join("; ")
}

/// Seconds as the largest whole unit that divides them: `30d`, `12h`, `90m`, `45s`.
fn human_secs(s: u64) -> String {
    match s {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
