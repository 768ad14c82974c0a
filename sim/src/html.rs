//! The `--html` page: a self-contained sequence diagram of a run (inline SVG, no scripts
//! or external resources), one lifeline per agent and the relay, an arrow per packet
//! labelled with its type (sender → relay when the relay queues it, relay → recipient
//! when the recipient's logic receives it), state changes, prompts and faults as notes.
//! Rows follow the order of events, not a time scale, so bursts stay readable; the
//! simulated time is written at the left of each row.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::scenario::Spec;
use crate::transcript::{IdNames, Line, Tag};
use crate::world::Report;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut o: String = s.chars().take(n.saturating_sub(1)).collect();
        o.push('…');
        o
    }
}

/// The page for a run.
pub fn page(spec: &Spec, seed: u64, lines: &[Line], report: &Report) -> String {
    let mut names = IdNames::default();
    let mut lanes: Vec<String> = spec.agents.iter().map(|a| a.name.clone()).collect();
    let mid = lanes.len().div_ceil(2);
    lanes.insert(mid, "relay".into());
    let x_of: BTreeMap<&str, usize> = lanes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), 140 + i * 220))
        .collect();
    let width = 140 + lanes.len() * 220 + 60;
    // Which packet the relay queued when: match `sent` lines to the next `queued` line
    // of the same sender → recipient.
    let mut rows: Vec<String> = Vec::new();
    let mut pending_sent: BTreeMap<(String, String), Vec<(String, String)>> = BTreeMap::new();
    let row_h = 26;
    let mut y = 70;
    for l in lines {
        let t = l.at.since(spec.start);
        let time = format!("{}.{:03}s", t.as_secs(), t.subsec_millis());
        let mut row = String::new();
        match &l.tag {
            Tag::Sent { pid, kind, peer } => {
                pending_sent
                    .entry((l.who.clone(), peer.clone()))
                    .or_default()
                    .push((pid.clone(), kind.clone()));
                continue;
            }
            Tag::Queued { from, to, .. } => {
                let key = (from.clone(), to.clone());
                let Some(list) = pending_sent.get_mut(&key) else {
                    continue;
                };
                if list.is_empty() {
                    continue;
                }
                let (pid, kind) = list.remove(0);
                let (Some(&x1), Some(&x2)) = (x_of.get(from.as_str()), x_of.get("relay")) else {
                    continue;
                };
                let label = format!("{kind} {}", names.name(&pid));
                let _ = write!(
                    row,
                    r##"<line x1="{x1}" y1="{y}" x2="{x2}" y2="{y}" class="up" marker-end="url(#a)"/><text x="{}" y="{}" class="lbl">{}</text>"##,
                    x1.min(x2) + 6,
                    y - 4,
                    esc(&label)
                );
            }
            Tag::Received { pid, kind, peer } => {
                let (Some(&x1), Some(&x2)) = (x_of.get("relay"), x_of.get(l.who.as_str())) else {
                    continue;
                };
                let label = format!("{kind} {} from {peer}", names.name(pid));
                let _ = write!(
                    row,
                    r##"<line x1="{x1}" y1="{y}" x2="{x2}" y2="{y}" class="down" marker-end="url(#a)"/><text x="{}" y="{}" class="lbl">{}</text>"##,
                    x1.min(x2) + 6,
                    y - 4,
                    esc(&label)
                );
            }
            Tag::State | Tag::Fault | Tag::User => {
                let Some(&x) = x_of.get(l.who.as_str()) else {
                    continue;
                };
                let class = match l.tag {
                    Tag::State => "state",
                    Tag::Fault => "fault",
                    _ => "user",
                };
                let text = clip(&names.scrub(&l.text), 70);
                let _ = write!(
                    row,
                    r##"<rect x="{}" y="{}" width="210" height="20" rx="4" class="{class}"/><text x="{}" y="{}" class="note"><title>{}</title>{}</text>"##,
                    x - 105,
                    y - 14,
                    x - 100,
                    y,
                    esc(&names.scrub(&l.text)),
                    esc(&clip(&text, 34))
                );
            }
            Tag::Note => continue,
        }
        let _ = write!(row, r##"<text x="8" y="{y}" class="time">{time}</text>"##);
        rows.push(row);
        y += row_h;
    }
    let height = y + 40;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}"><defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#333"/></marker></defs>"##
    );
    for (name, &x) in &x_of {
        let _ = write!(
            svg,
            r##"<line x1="{x}" y1="40" x2="{x}" y2="{}" class="life"/><text x="{x}" y="30" class="head" text-anchor="middle">{}</text>"##,
            height - 20,
            esc(name)
        );
    }
    for r in rows {
        svg.push_str(&r);
    }
    svg.push_str("</svg>");
    let verdict = if report.passed() {
        "all checks passed".to_string()
    } else {
        format!("{} violation(s)", report.violations.len())
    };
    let mut violations = String::new();
    for v in report.violations.iter().chain(report.known.iter()) {
        let _ = write!(violations, "<li>{}</li>", esc(&names.scrub(&v.to_string())));
    }
    let a = report.audit;
    format!(
        r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>a2acp-sim: {name} (seed {seed})</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
.life {{ stroke: #bbb; stroke-width: 2; stroke-dasharray: 4 4; }}
.head {{ font-weight: bold; font-size: 15px; }}
.up {{ stroke: #1565c0; stroke-width: 1.5; }}
.down {{ stroke: #2e7d32; stroke-width: 1.5; }}
.lbl {{ font-size: 11px; fill: #333; }}
.time {{ font-size: 10px; fill: #888; font-family: monospace; }}
.note {{ font-size: 10px; }}
.state {{ fill: #fff8e1; stroke: #f9a825; }}
.fault {{ fill: #ffebee; stroke: #c62828; }}
.user {{ fill: #e3f2fd; stroke: #1565c0; }}
</style></head><body>
<h1>{name} <small>(seed {seed})</small></h1>
<p>{summary}</p>
<p><b>{verdict}</b> — exactly-once audit: accepted {acc}, delivered {del}, refused {refd}, lost {lost}, duplicated {dup}, unexpected {unx}.</p>
<ul>{violations}</ul>
<p>Blue: a packet reaching the relay; green: the relay's delivery reaching the recipient's logic. Yellow notes: state changes; blue notes: users; red notes: faults. Hover a note for its full text.</p>
{svg}
</body></html>
"##,
        name = esc(&spec.name),
        summary = esc(&spec.summary),
        acc = a.accepted,
        del = a.delivered,
        refd = a.refused,
        lost = a.lost,
        dup = a.duplicated,
        unx = a.unexpected,
    )
}
