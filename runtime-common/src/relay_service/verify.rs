//! The verifiers (module documentation, step 1): each parses its connections' frames in
//! order and checks the envelope signatures of the `send`s it can — in one batch
//! verification when several are waiting — against a cache of decompressed keys.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use a2acp_core::crypto::{PublicKey, ENVELOPE_VERSION};
use a2acp_core::link::ClientFrame;
use a2acp_core::rate_limit::TokenBucket;
use a2acp_core::relay::{self, ConnId, RelayConfig, Verified};
use a2acp_core::Timestamp;
use ed25519_dalek::{Signature, VerifyingKey};

use super::{
    Ctl, Item, Msg, Shard, Shared, VerifyIn, BATCH_MIN, CLOSED_MAX, IDLE_WAKE, KEY_CACHE_MAX,
    VERIFY_CHUNK,
};

pub(super) struct Verifier {
    pub(super) rx: flume::Receiver<VerifyIn>,
    pub(super) core: flume::Sender<Msg>,
    pub(super) shards: Arc<[Shard]>,
    pub(super) index: usize,
    pub(super) shared: Arc<Shared>,
    pub(super) state: VerifyState,
}

impl Verifier {
    pub(super) fn run(mut self) {
        let mut input = Vec::with_capacity(VERIFY_CHUNK);
        loop {
            if self.shared.stop.load(Ordering::SeqCst) {
                return;
            }
            match self.rx.recv_timeout(IDLE_WAKE) {
                Ok(m) => input.push(m),
                Err(flume::RecvTimeoutError::Timeout) => {
                    self.apply_ctl();
                    continue;
                }
                Err(flume::RecvTimeoutError::Disconnected) => return,
            }
            while input.len() < VERIFY_CHUNK {
                match self.rx.try_recv() {
                    Ok(m) => input.push(m),
                    Err(_) => break,
                }
            }
            self.apply_ctl();
            let items = self.state.process(input.drain(..));
            if !items.is_empty() && self.core.send(Msg::Items(items)).is_err() {
                return;
            }
        }
    }

    fn apply_ctl(&mut self) {
        let ctl = match self.shards[self.index].ctl.lock() {
            Ok(mut g) if !g.is_empty() => std::mem::take(&mut *g),
            _ => return,
        };
        for c in ctl {
            self.state.apply(c);
        }
    }
}

/// A registered key, decompressed once for both ways of verifying.
pub(super) struct CachedKey {
    pub(super) key: PublicKey,
    pub(super) vk: VerifyingKey,
}

/// An authenticated connection as a verifier sees it.
pub(super) struct AuthedConn {
    /// The key its address is registered with (`None`: another relay's link, whose
    /// pushes name any sender of its domain).
    pub(super) key: Option<[u8; 32]>,
    /// Signatures it may still have checked here: the relay's rate limit, so that a
    /// sender beyond its rate (whose frames the state machine refuses before checking
    /// anything) does not buy signature checks either. Past it, frames go on unverified.
    pub(super) budget: TokenBucket,
}

/// A verifier's knowledge: which key each of its authenticated connections signs with,
/// and the decompressed keys (`PublicKey::from_bytes` costs about a verification).
pub(super) struct VerifyState {
    /// The instant the budgets' timestamps count from.
    pub(super) epoch: Instant,
    pub(super) max_frame: usize,
    pub(super) rate: u32,
    pub(super) burst: u32,
    pub(super) conns: HashMap<ConnId, AuthedConn>,
    pub(super) keys: HashMap<[u8; 32], Option<CachedKey>>,
    /// Connections the relay closed and whose disconnection has not come through yet.
    pub(super) closed: HashSet<ConnId>,
    /// Relay links this relay dialled: their frames go on unparsed.
    pub(super) dialed: HashSet<ConnId>,
    /// A relay link's frame budget (federation's link rate and burst).
    pub(super) link_rate: (u32, u32),
}

impl VerifyState {
    pub(super) fn new(max_frame: usize, cfg: &RelayConfig) -> Self {
        VerifyState {
            epoch: Instant::now(),
            max_frame,
            rate: cfg.rate_per_sec,
            burst: cfg.rate_burst.max(1),
            conns: HashMap::new(),
            keys: HashMap::new(),
            closed: HashSet::new(),
            dialed: HashSet::new(),
            link_rate: cfg
                .federation
                .as_ref()
                .map_or((0, 1), |f| (f.link_rate_per_sec, f.link_rate_burst.max(1))),
        }
    }

    pub(super) fn apply(&mut self, c: Ctl) {
        match c {
            Ctl::Authed(conn, key) => {
                let budget = TokenBucket::full(self.stamp(Instant::now()), self.burst);
                self.conns.insert(
                    conn,
                    AuthedConn {
                        key: Some(key),
                        budget,
                    },
                );
            }
            Ctl::Link(conn) => {
                let budget = TokenBucket::full(self.stamp(Instant::now()), self.link_rate.1);
                self.conns.insert(conn, AuthedConn { key: None, budget });
            }
            Ctl::Forget(conn) => {
                self.conns.remove(&conn);
            }
            Ctl::Closed(conn) => {
                self.conns.remove(&conn);
                if self.closed.len() >= CLOSED_MAX {
                    self.closed.clear();
                }
                self.closed.insert(conn);
            }
        }
    }

    /// `now` on the budgets' clock (milliseconds since the verifier started).
    fn stamp(&self, now: Instant) -> Timestamp {
        let ms = now.saturating_duration_since(self.epoch).as_millis();
        Timestamp(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// Whether `conn` is authenticated with `key` and within its budget (taking one).
    fn may_verify(&mut self, conn: ConnId, key: &[u8; 32], now: Instant) -> bool {
        let now = self.stamp(now);
        let (rate, burst, link) = (self.rate, self.burst, self.link_rate);
        match self.conns.get_mut(&conn) {
            Some(c) if c.key == Some(*key) => c.budget.try_take(now, rate, burst),
            Some(c) if c.key.is_none() => c.budget.try_take(now, link.0, link.1),
            _ => false,
        }
    }

    /// Whether `key` is cached (decompressing it on first use).
    fn ensure_key(&mut self, key: &[u8; 32]) -> bool {
        if let Some(k) = self.keys.get(key) {
            return k.is_some();
        }
        if self.keys.len() >= KEY_CACHE_MAX {
            self.keys.clear();
        }
        let k = PublicKey::from_bytes(key).ok().and_then(|pk| {
            VerifyingKey::from_bytes(key)
                .ok()
                .map(|vk| CachedKey { key: pk, vk })
        });
        let ok = k.is_some();
        self.keys.insert(*key, k);
        ok
    }

    /// Parses the frames and verifies the `send`s it can, keeping the order.
    pub(super) fn process(&mut self, input: impl Iterator<Item = VerifyIn>) -> Vec<Item> {
        let mut items = Vec::with_capacity(input.size_hint().0);
        let mut todo = Vec::new();
        let now = Instant::now();
        for m in input {
            match m {
                VerifyIn::Bytes(conn, _) | VerifyIn::Oversized(conn, _)
                    if self.closed.contains(&conn) => {}
                VerifyIn::Oversized(conn, limit) => items.push(Item::Oversized(conn, limit)),
                VerifyIn::Dialed(conn) => {
                    self.dialed.insert(conn);
                }
                VerifyIn::Bytes(conn, b) if self.dialed.contains(&conn) => {
                    items.push(Item::Raw(conn, b.into()));
                }
                VerifyIn::Bytes(conn, b) => {
                    let parsed = relay::parse_frame(&b, self.max_frame);
                    drop(b);
                    if let Some(ClientFrame::Send { env, .. } | ClientFrame::Push { env, .. }) =
                        parsed.as_ref().ok().map(|p| p.frame())
                    {
                        if env.v == ENVELOPE_VERSION
                            && self.may_verify(conn, &env.from_key, now)
                            && self.ensure_key(&env.from_key)
                        {
                            todo.push(items.len());
                        }
                    }
                    items.push(Item::Frame(conn, parsed, Verified::No));
                }
                VerifyIn::Disconnected(conn) => {
                    self.conns.remove(&conn);
                    self.dialed.remove(&conn);
                    self.closed.remove(&conn);
                    items.push(Item::Disconnected(conn));
                }
                VerifyIn::Wake => {}
            }
        }
        self.verify(&mut items, &todo);
        items
    }

    /// Marks the `send`s at `todo` whose signature verifies.
    fn verify(&self, items: &mut [Item], todo: &[usize]) {
        if todo.len() < BATCH_MIN {
            for &i in todo {
                self.verify_one(&mut items[i]);
            }
            return;
        }
        let (batch, single): (Vec<usize>, Vec<usize>) = todo
            .iter()
            .partition(|&&i| send_env(&items[i]).is_some_and(|e| batchable_r(&e.sig)));
        for &i in &single {
            self.verify_one(&mut items[i]);
        }
        for chunk in batch.chunks(VERIFY_CHUNK) {
            if chunk.len() < BATCH_MIN || !self.verify_batch(items, chunk) {
                // Find the culprits one by one (strictly).
                for &i in chunk {
                    self.verify_one(&mut items[i]);
                }
                continue;
            }
            for &i in chunk {
                if let Item::Frame(_, _, v) = &mut items[i] {
                    *v = Verified::EnvelopeSignature;
                }
            }
        }
    }

    fn verify_batch(&self, items: &[Item], chunk: &[usize]) -> bool {
        let mut msgs = Vec::with_capacity(chunk.len());
        let mut sigs = Vec::with_capacity(chunk.len());
        let mut vks = Vec::with_capacity(chunk.len());
        for &i in chunk {
            let Some(env) = send_env(&items[i]) else {
                return false;
            };
            let Some(Some(k)) = self.keys.get(&env.from_key) else {
                return false;
            };
            msgs.push(env.signed_bytes());
            sigs.push(Signature::from_bytes(&env.sig));
            vks.push(k.vk);
        }
        let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        ed25519_dalek::verify_batch(&refs, &sigs, &vks).is_ok()
    }

    fn verify_one(&self, item: &mut Item) {
        let Item::Frame(_, Ok(parsed), v) = item else {
            return;
        };
        let frame = parsed.frame();
        let (ClientFrame::Send { env, .. } | ClientFrame::Push { env, .. }) = frame else {
            return;
        };
        if let Some(Some(k)) = self.keys.get(&env.from_key) {
            if relay::verify_send(frame, &k.key) {
                *v = Verified::EnvelopeSignature;
            }
        }
    }
}

pub(super) fn send_env(item: &Item) -> Option<&a2acp_core::crypto::Envelope> {
    match item {
        Item::Frame(_, Ok(p), _) => match p.frame() {
            ClientFrame::Send { env, .. } | ClientFrame::Push { env, .. } => Some(env),
            _ => None,
        },
        _ => None,
    }
}

/// The y coordinates (low 255 bits, little-endian) of the eight points of small order:
/// 0 (order 4), 1 (the identity), p − 1 (order 2) and ±y₈ (order 8).
pub(super) const SMALL_ORDER_Y: [[u8; 32]; 5] = [
    [0; 32],
    [
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0,
    ],
    [
        0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
    [
        0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98,
        0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53,
        0xfc, 0x05,
    ],
    [
        0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67,
        0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac,
        0x03, 0x7a,
    ],
];

/// Whether a signature may be batch-verified. `verify_strict` (what the relay applies)
/// refuses a non-canonical encoding of R and an R of small order; the batch equation
/// would not, so such signatures are verified one by one. With the keys already checked
/// to be torsion-free, a batch then accepts what `verify_strict` accepts, except an R
/// with a small-order component added — a malleation only the key's holder can make
/// (R is hashed into the signature), which the recipient's own strict check refuses.
pub(super) fn batchable_r(sig: &[u8; 64]) -> bool {
    let mut y = [0u8; 32];
    y.copy_from_slice(&sig[..32]);
    y[31] &= 0x7f;
    // y ≥ p = 2²⁵⁵ − 19 is a non-canonical encoding.
    let non_canonical = y[31] == 0x7f && y[1..31].iter().all(|&b| b == 0xff) && y[0] >= 0xed;
    !non_canonical && !SMALL_ORDER_Y.contains(&y)
}
