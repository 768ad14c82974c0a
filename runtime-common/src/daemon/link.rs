//! The relay link: reconnection with backoff and jitter, and the pump of one connection.

use std::future::Future;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::{Message, Utf8Bytes};
use async_tungstenite::WebSocketStream;
use futures_util::io::{AsyncRead, AsyncWrite};
use futures_util::{SinkExt, StreamExt};
use tracing::{debug, info, warn};

use super::*;
use crate::config::RelayUrls;
use crate::race::race;
use crate::ws::ConnectError;

/// Exponential reconnection backoff with jitter: `min`, doubling up to a cap, each wait
/// drawn between three quarters and five quarters of the current step. The cap is
/// `short_max` while the relay was reachable within [`RECENTLY_REACHABLE`] (a relay
/// restart is found again within seconds: 0.25, 0.5, 1, 2, 4, 5, 5… s) and `max` after
/// a longer outage (…10, 20, 30 s), so a relay down for long is not hammered.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    short_max: Duration,
    max: Duration,
    cur: Duration,
}

impl Backoff {
    /// Starts at `min`; the cap is `short_max` until [`Backoff::next_wait`] is told the
    /// relay was last reachable longer than [`RECENTLY_REACHABLE`] ago.
    pub fn new(min: Duration, short_max: Duration, max: Duration) -> Self {
        Backoff {
            min,
            short_max: short_max.min(max),
            max,
            cur: min,
        }
    }

    /// The next wait (and doubles the step after it). `unreachable_for`: how long the
    /// relay has not been reachable.
    pub fn next_wait(&mut self, unreachable_for: Duration) -> Duration {
        let cap = if unreachable_for < RECENTLY_REACHABLE {
            self.short_max
        } else {
            self.max
        }
        .max(self.min);
        // A long outage: doubling resumes from the short cap up to the long one.
        self.cur = self.cur.min(cap);
        let step = self.cur.as_millis() as u64;
        let jitter = {
            let mut b = [0u8; 8];
            let _ = getrandom::fill(&mut b);
            u64::from_le_bytes(b) % (step / 2).max(1)
        };
        let wait = Duration::from_millis(step - step / 4 + jitter);
        self.cur = (self.cur * 2).min(cap);
        wait
    }

    /// Back to `min` (after a connection that lasted).
    pub fn reset(&mut self) {
        self.cur = self.min;
    }
}

/// Keeps a WebSocket to the relay for the agent loop, through one of its doors `relay`
/// (the next one after a failure, [`Doors`]): connects with `connect` (the binding's TCP
/// connect, Nagle off, then [`crate::ws::handshake`]), reports [`LinkEvent::Up`], moves
/// frames both ways, reports [`LinkEvent::Down`] and reconnects — at once to the next
/// door, or after a [`Backoff`] wait (`sleep`: the binding's timer) once every door failed
/// in the round. Returns when the agent loop is gone or says another connection of the
/// agent took over ([`LinkOut::Replaced`]: the core, not the link, reads the relay's
/// frames).
#[allow(clippy::too_many_arguments)]
pub async fn link_loop<St, C, CF, S, SF>(
    relay: RelayUrls,
    to_agent: flume::Sender<LinkEvent>,
    min: Duration,
    short_max: Duration,
    max: Duration,
    connect: C,
    sleep: S,
) where
    St: AsyncRead + AsyncWrite + Unpin,
    C: Fn(String) -> CF,
    CF: Future<Output = Result<WebSocketStream<St>, ConnectError>>,
    S: Fn(Duration) -> SF,
    SF: Future<Output = ()>,
{
    let mut backoff = Backoff::new(min, short_max, max);
    let mut doors = Doors::new(relay);
    // When the relay was last reachable (a connection up).
    let mut reachable = Instant::now();
    loop {
        let door = doors.current().to_string();
        match connect(door.clone()).await {
            Ok(ws) => {
                let started = Instant::now();
                let (tx, rx) = flume::unbounded();
                if to_agent
                    .send_async(LinkEvent::Up(tx, door.clone()))
                    .await
                    .is_err()
                {
                    return;
                }
                let end = pump(ws, &rx, &to_agent).await;
                reachable = Instant::now();
                match end {
                    PumpEnd::Replaced => return,
                    PumpEnd::GiveUp(None) => {
                        let _ = to_agent.send_async(LinkEvent::GaveUp).await;
                        return;
                    }
                    PumpEnd::GiveUp(Some(after)) => {
                        if to_agent.send_async(LinkEvent::Down).await.is_err() {
                            return;
                        }
                        info!(
                            retry_in_s = after.as_secs(),
                            "registration refused: trying again later"
                        );
                        sleep(after).await;
                        // The domain refused, not this door: the same door again.
                        backoff.reset();
                        doors.worked();
                        continue;
                    }
                    PumpEnd::Lost => {}
                }
                if to_agent.send_async(LinkEvent::Down).await.is_err() {
                    return;
                }
                // The agent loop reads the frames that came before `Down` first: the
                // relay's `replaced` (then closing the connection) among them is answered
                // with `Replaced` on this connection's channel, which it then lets go of.
                while let Ok(o) = rx.recv_async().await {
                    if o == LinkOut::Replaced {
                        return;
                    }
                }
                if started.elapsed() > LASTED {
                    backoff.reset();
                    doors.worked();
                }
            }
            Err(e) => warn!(door = %door, error = %e, "relay unreachable"),
        }
        if to_agent.is_disconnected() {
            return;
        }
        if doors.failed() == NextDial::Now {
            info!(door = %doors.current(), "trying the relay's next door");
            continue;
        }
        let wait = backoff.next_wait(reachable.elapsed());
        info!(
            retry_in_ms = wait.as_millis() as u64,
            door = %doors.current(),
            "reconnecting to the relay"
        );
        sleep(wait).await;
    }
}

/// How long a connection must have lasted for its end to start the backoff and the
/// round of doors over (a node that accepts and drops at once is not a door that works).
const LASTED: Duration = Duration::from_secs(10);

/// How a connection ended.
enum PumpEnd {
    /// Lost or closed: reconnect.
    Lost,
    /// The agent loop said another connection replaced this one ([`LinkOut::Replaced`]).
    Replaced,
    /// The agent gave up ([`LinkOut::GiveUp`]).
    GiveUp(Option<Duration>),
}

/// Moves frames both ways until the connection ends.
async fn pump<St>(
    ws: WebSocketStream<St>,
    rx: &flume::Receiver<LinkOut>,
    to_agent: &flume::Sender<LinkEvent>,
) -> PumpEnd
where
    St: AsyncRead + AsyncWrite + Unpin,
{
    let (mut sink, mut source) = ws.split();
    let mut replaced = false;
    let mut give_up = None;
    let reader = async {
        while let Some(m) = source.next().await {
            let bytes: Vec<u8> = match m {
                Ok(Message::Text(t)) => t.as_bytes().to_vec(),
                Ok(Message::Binary(b)) => b.to_vec(),
                Ok(Message::Close(f)) => {
                    debug!(frame = ?f, "relay closed the connection");
                    break;
                }
                Ok(_) => continue,
                Err(e) => {
                    debug!(error = %e, "relay connection lost");
                    break;
                }
            };
            if to_agent.send_async(LinkEvent::Frame(bytes)).await.is_err() {
                break;
            }
        }
    };
    let writer = async {
        while let Ok(first) = rx.recv_async().await {
            let mut next = Some(first);
            while let Some(o) = next.take() {
                match o {
                    LinkOut::Frame(b) => {
                        let Ok(t) = Utf8Bytes::try_from(b) else {
                            continue;
                        };
                        if sink.feed(Message::Text(t)).await.is_err() {
                            return;
                        }
                    }
                    LinkOut::Close => {
                        let _ = sink.close(None).await;
                        return;
                    }
                    LinkOut::GiveUp(after) => {
                        give_up = Some(after);
                        let _ = sink.close(None).await;
                        return;
                    }
                    LinkOut::Replaced => {
                        replaced = true;
                        let _ = sink.close(None).await;
                        return;
                    }
                }
                next = rx.try_recv().ok();
            }
            if sink.flush().await.is_err() {
                return;
            }
        }
        let _ = sink.close(None).await;
    };
    race(reader, writer).await;
    match (replaced, give_up) {
        (true, _) => PumpEnd::Replaced,
        (false, Some(after)) => PumpEnd::GiveUp(after),
        (false, None) => PumpEnd::Lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> u64 {
        d.as_millis() as u64
    }

    #[test]
    fn backoff_is_short_while_the_relay_was_recently_reachable_and_long_after() {
        let mut b = Backoff::new(
            Duration::from_millis(250),
            Duration::from_secs(5),
            Duration::from_secs(30),
        );
        let recent = Duration::from_secs(10);
        // Steps 250, 500, 1000, 2000, 4000, 5000, 5000 ms, each within ±25 %.
        for step in [250u64, 500, 1000, 2000, 4000, 5000, 5000] {
            let w = ms(b.next_wait(recent));
            assert!(w >= step * 3 / 4 && w < step * 5 / 4, "{w} for {step}");
        }
        // A long outage: doubling resumes up to 30 s.
        let long = RECENTLY_REACHABLE + Duration::from_secs(1);
        for step in [5000u64, 10_000, 20_000, 30_000, 30_000] {
            let w = ms(b.next_wait(long));
            assert!(w >= step * 3 / 4 && w < step * 5 / 4, "{w} for {step}");
        }
        b.reset();
        assert!(ms(b.next_wait(recent)) < 313);
    }
}
