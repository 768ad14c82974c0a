//! What the scheduling negotiator reads from the two contexts of a thread (§4): the
//! event, its length, the presentation zone and both sides' time windows, worked out once.

use chrono::NaiveDate;

use super::flexibility::{flex_of, Flex};
use crate::negotiator::needs::{self, EventKind};
use crate::negotiator::str_field;
use crate::negotiator::windows::{place, read_side, LocalWin, SideWindows, Zone};
use crate::negotiator::View;
use crate::packet::Context;

/// Shortest event accepted, in seconds.
pub(super) const MIN_EVENT_SECS: i64 = 15 * 60;

/// Longest event accepted, in seconds.
pub(super) const MAX_EVENT_SECS: i64 = 24 * 3600;

/// What the negotiator knows about the thread, worked out once.
pub(super) struct Facts<'a> {
    pub(super) view: &'a View<'a>,
    /// The initiator's context.
    pub(super) init: &'a Context,
    /// The responder's context.
    pub(super) resp: &'a Context,
    /// Lower-case event type (may be empty).
    pub(super) event: String,
    /// Whether `event` comes from a context (and so may appear in a proposal).
    pub(super) event_from_ctx: bool,
    pub(super) kind: EventKind,
    /// Event length in seconds.
    pub(super) duration: i64,
    /// Zone proposals are shown in: the initiator's.
    pub(super) pres: Zone,
    /// Whether `pres` is a real zone rather than the UTC fallback.
    pub(super) pres_known: bool,
    pub(super) my_side: SideWindows,
    pub(super) their_side: SideWindows,
}

impl<'a> Facts<'a> {
    pub(super) fn new(view: &'a View<'a>) -> Self {
        let (init, resp) = if view.i_am_initiator {
            (view.mine, view.theirs)
        } else {
            (view.theirs, view.mine)
        };
        let event = needs::event_type(view.intent, init, resp);
        let event_from_ctx = str_field(init, "event_type")
            .or_else(|| str_field(resp, "event_type"))
            .is_some();
        let kind = needs::event_kind(&event);
        let duration = event_duration(&event, init, resp);
        let my_side = read_side(view.mine);
        let their_side = read_side(view.theirs);
        let (init_side, resp_side) = if view.i_am_initiator {
            (&my_side, &their_side)
        } else {
            (&their_side, &my_side)
        };
        let pres = init_side
            .zone
            .or_else(|| init_side.raw.iter().find_map(|w| w.zone))
            .or(resp_side.zone)
            .or_else(|| resp_side.raw.iter().find_map(|w| w.zone));
        Facts {
            view,
            init,
            resp,
            event,
            event_from_ctx,
            kind,
            duration,
            pres: pres.unwrap_or_else(Zone::utc),
            pres_known: pres.is_some(),
            my_side,
            their_side,
        }
    }

    pub(super) fn my_flex(&self, aspect: &str) -> Option<Flex> {
        flex_of(self.view.mine, aspect)
    }

    pub(super) fn their_flex(&self, aspect: &str) -> Option<Flex> {
        flex_of(self.view.theirs, aspect).or_else(|| flex_of(self.view.remembered, aspect))
    }

    /// Places both sides' windows on dates.
    pub(super) fn placed(&self) -> Placed {
        let my_extra = explicit_dates(&self.their_side);
        let their_extra = explicit_dates(&self.my_side);
        let (mine, my_undated) = place(
            &with_dates(&self.my_side, &self.their_side, &my_extra),
            &self.their_side,
            self.pres,
        );
        let (theirs, their_undated) = place(
            &with_dates(&self.their_side, &self.my_side, &their_extra),
            &self.my_side,
            self.pres,
        );
        Placed {
            mine,
            theirs,
            undated: !my_undated.is_empty() || !their_undated.is_empty(),
        }
    }
}

/// Both sides' windows on dates.
pub(super) struct Placed {
    pub(super) mine: Vec<LocalWin>,
    pub(super) theirs: Vec<LocalWin>,
    /// Some window could not be given a date.
    pub(super) undated: bool,
}

/// Dates written inside a side's windows.
pub(crate) fn explicit_dates(side: &SideWindows) -> Vec<NaiveDate> {
    let mut v: Vec<NaiveDate> = side.raw.iter().filter_map(|w| w.date).collect();
    v.sort();
    v.dedup();
    v.truncate(14);
    v
}

/// A side with, when neither it nor the other side names a date, the dates written in
/// the other side's windows as anchors.
pub(super) fn with_dates(
    side: &SideWindows,
    other: &SideWindows,
    extra: &[NaiveDate],
) -> SideWindows {
    let mut s = side.clone();
    if s.dates.is_empty() && other.dates.is_empty() {
        s.dates = extra.to_vec();
    }
    s
}

/// Event length: the `duration` field (ISO 8601, 15 min to 24 h) of the initiator, else
/// the responder; else 2 h for dinner/supper, 1.5 h for lunch, 1 h otherwise.
pub(crate) fn event_duration(event: &str, init: &Context, resp: &Context) -> i64 {
    let from_field = [init, resp]
        .iter()
        .filter_map(|c| str_field(c, "duration"))
        .filter_map(crate::time::parse_iso8601_duration)
        .filter_map(|d| i64::try_from(d.as_secs()).ok())
        .find(|s| (MIN_EVENT_SECS..=MAX_EVENT_SECS).contains(s));
    from_field.unwrap_or_else(|| default_duration(event))
}

pub(crate) fn default_duration(event: &str) -> i64 {
    if event.contains("dinner") || event.contains("supper") {
        2 * 3600
    } else if event.contains("lunch") {
        90 * 60
    } else {
        3600
    }
}

pub(super) fn event_word(f: &Facts) -> String {
    if f.event.is_empty() {
        "meeting".to_string()
    } else {
        f.event.clone()
    }
}

pub(crate) fn zone_of(side: &SideWindows) -> Option<Zone> {
    side.zone.or_else(|| side.raw.iter().find_map(|w| w.zone))
}
