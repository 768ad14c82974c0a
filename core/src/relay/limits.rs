//! Rate limits: the frame budget of a connection, the bucket of an address and the
//! refusal allowance of a connection (module documentation of [`super`]).

use super::{ConnId, FrameError, ParsedFrame, Relay, CHEAP_FRAME_COST, FRAME_COST};
use crate::address::Address;
use crate::link::{ClientFrame, ErrorCode};
use crate::rate_limit::TokenBucket;
use crate::time::Timestamp;

impl Relay {
    /// Charges a frame to its connection's budget. The first frame it cannot pay is
    /// refused with `rate_limited`; another before it can pay again closes the
    /// connection. Returns whether the frame was paid (and is to be processed).
    pub(super) fn pay_frame(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        parsed: &Result<ParsedFrame, FrameError>,
    ) -> bool {
        let (mut rate, mut burst) = (
            self.config.conn_rate_per_sec,
            self.config.conn_rate_burst.max(1),
        );
        if let Some(f) = self.config.federation.as_ref().filter(|_| {
            self.conns
                .get(&conn)
                .is_some_and(|c| matches!(c.phase, super::Phase::Link(_)))
        }) {
            (rate, burst) = (f.link_rate_per_sec, f.link_rate_burst.max(1));
        }
        let cost = match parsed.as_ref().map(ParsedFrame::frame) {
            Ok(ClientFrame::Ack { .. } | ClientFrame::Pong { .. }) => CHEAP_FRAME_COST,
            _ => FRAME_COST,
        };
        let Some(c) = self.conns.get_mut(&conn) else {
            return false;
        };
        if c.budget.try_take_milli(now, rate, burst, cost) {
            c.over_budget = false;
            return true;
        }
        if c.over_budget {
            self.close_for_refusals(conn, "frames beyond the connection's budget");
            return false;
        }
        c.over_budget = true;
        c.strikes = c.strikes.saturating_add(1);
        let seq = match parsed.as_ref().map(ParsedFrame::frame) {
            Ok(ClientFrame::Send { seq, .. }) => Some(*seq),
            _ => None,
        };
        self.refuse(
            conn,
            ErrorCode::RateLimited,
            "frame budget exceeded: slow down, or the connection is closed".into(),
            seq,
        );
        false
    }

    /// Takes the refusals of the frame just handled from the connection's allowance,
    /// closing it when the allowance is exhausted.
    pub(super) fn settle_strikes(&mut self, now: Timestamp, conn: ConnId) {
        let (rate, burst) = (
            self.config.refusals_per_sec,
            self.config.refusal_burst.max(1),
        );
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let strikes = std::mem::take(&mut c.strikes);
        for _ in 0..strikes {
            if !c.allowance.try_take(now, rate, burst) {
                self.close_for_refusals(conn, "too many refused frames");
                return;
            }
        }
    }

    /// Sends `error too_many_refusals` and closes the connection with that code.
    pub(super) fn close_for_refusals(&mut self, conn: ConnId, why: &str) {
        self.refuse(
            conn,
            ErrorCode::TooManyRefusals,
            format!("{why}: connection closed"),
            None,
        );
        self.counters.closed_for_refusals = self.counters.closed_for_refusals.saturating_add(1);
        self.close(conn, ErrorCode::TooManyRefusals);
    }

    /// The rate bucket of an authenticated address, created full.
    pub(super) fn bucket(&mut self, now: Timestamp, address: &Address) -> &mut TokenBucket {
        let burst = self.config.rate_burst;
        self.buckets
            .entry(address.clone())
            .or_insert_with(|| TokenBucket::full(now, burst))
    }

    /// Takes one request of `address` (the sender of a frame on `conn`) from its rate
    /// bucket: `false`, with `rate_limited` answered (naming `seq`, if the frame had one),
    /// when the bucket is empty.
    pub(super) fn charge(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        address: &Address,
        seq: Option<u64>,
    ) -> bool {
        let (rate, burst) = (self.config.rate_per_sec, self.config.rate_burst);
        if self.bucket(now, address).try_take(now, rate, burst) {
            return true;
        }
        self.refuse(conn, ErrorCode::RateLimited, "slow down".into(), seq);
        false
    }
}
