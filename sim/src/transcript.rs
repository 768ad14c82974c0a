//! The transcript of a run, in the format of `a2acp_core::harness` (with its vocabulary, `a2acp_core::transcript`): a legend line, a
//! sim-time column, who, `>` sent / `<` received / `|` state change or local event, and
//! random ids (`thr_…`, `pkt_…`) replaced by stable names in order of first appearance.

use std::fmt::Write as _;

use a2acp_core::agent::{Command, Prompt};
use a2acp_core::transcript::{self, Detail};
use a2acp_core::Timestamp;

/// What a line is about, for the sequence diagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    /// Plain text.
    Note,
    /// An agent sent a packet.
    Sent {
        /// Packet id.
        pid: String,
        /// Packet type.
        kind: String,
        /// The recipient's name.
        peer: String,
    },
    /// An agent's logic received a packet.
    Received {
        /// Packet id.
        pid: String,
        /// Packet type.
        kind: String,
        /// The sender's name.
        peer: String,
    },
    /// The relay accepted a packet.
    Queued {
        /// Packet id, when known.
        pid: Option<String>,
        /// Sender name.
        from: String,
        /// Recipient name.
        to: String,
    },
    /// A thread changed state.
    State,
    /// A fault was injected.
    Fault,
    /// A user acted or was asked.
    User,
}

/// One transcript line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// When (simulation time).
    pub at: Timestamp,
    /// Who: an agent's name, `relay`, or `net`.
    pub who: String,
    /// `>` sent, `<` received, `|` state change or local event.
    pub mark: char,
    /// What.
    pub text: String,
    /// Structure for the diagram.
    pub tag: Tag,
}

/// Renders lines (all, or one participant's) with the legend.
pub fn render(lines: &[Line], start: Timestamp, who: Option<&str>) -> String {
    render_with(lines, start, who, &mut IdNames::default())
}

/// [`render`] with a given id scrubber (to scrub later text with the same names).
pub fn render_with(
    lines: &[Line],
    start: Timestamp,
    who: Option<&str>,
    names: &mut IdNames,
) -> String {
    let mut out = String::from(
        "# time since start | who | > sent, < received, | state change or local event\n",
    );
    let width = lines.iter().map(|l| l.who.len()).max().unwrap_or(5).max(5);
    for l in lines {
        if who.is_some_and(|w| w != l.who) {
            continue;
        }
        let t = l.at.since(start);
        let _ = writeln!(
            out,
            "{:>8}.{:03}s {:<width$} {} {}",
            t.as_secs(),
            t.subsec_millis(),
            l.who,
            l.mark,
            names.scrub(&l.text),
        );
    }
    out
}

pub use a2acp_core::transcript::{compact, describe_relay_event, short, IdNames};

/// A prompt as the simulated user sees it: the shared renderer, in brief.
pub fn describe_prompt(p: &Prompt) -> String {
    transcript::describe_prompt(p, Detail::Brief)
}

/// A user command in words: the shared renderer, in brief.
pub fn describe_command(c: &Command) -> String {
    transcript::describe_command(c, Detail::Brief)
}
