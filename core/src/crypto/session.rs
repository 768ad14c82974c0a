//! Per-thread key agreement, sealing and opening of envelopes (docs/protocol.md "The
//! end-to-end envelope").
//!
//! Each agent holds one [`ThreadSession`] per thread: one X25519 ephemeral key pair, the
//! peer's ephemeral key once learnt, the thread the session is bound to, and a send
//! counter for nonces. While the peer's ephemeral key is unknown, envelopes are sealed to
//! the recipient's static X25519 key ("es" mode); afterwards to the peer's ephemeral key
//! ("ee" mode). Derived keys are cached (not persisted) so one agreement happens per
//! thread, direction and mode, not per packet (and one `ee` agreement gives the keys of
//! both directions).

use std::collections::BTreeMap;
use std::fmt;

use chacha20poly1305::XChaCha20Poly1305;
use hkdf::Hkdf;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::Sha256;
use x25519_dalek::StaticSecret;

use super::envelope::put_opt32;
use super::primitives::{agree_with, cipher_from_key, open_with, seal_with};
use super::{
    check_lp, check_outer_sig, put_lp, thread_tag, CryptoError, Direction, Envelope, IdentityKey,
    PublicKey, AD_LABEL, ENVELOPE_VERSION, KDF_SALT,
};
use crate::address::Address;
use crate::encoding::{b64_array, b64_encode, b64_opt_array};

/// Most derived keys a session caches; legitimately at most four are live (two modes,
/// two directions).
const KEY_CACHE_MAX: usize = 8;

/// A successfully opened envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The thread id carried inside the ciphertext; its tag equals the envelope's
    /// `thread`.
    pub thread_id: String,
    /// The packet bytes.
    pub packet: Vec<u8>,
}

/// Per-thread key agreement state of one agent.
///
/// Serialisable: it is persisted inside the agent's thread record. Derived keys are a
/// cache, not persisted, and recomputed on first use after a restore. `PartialEq`
/// compares the persisted state only. `Debug` never prints the secret.
#[derive(Clone)]
pub struct ThreadSession {
    /// Our ephemeral X25519 secret; `None` once erased.
    eph_secret: Option<StaticSecret>,
    /// Our ephemeral X25519 public key (kept after erasure).
    eph_public: [u8; 32],
    /// The peer's ephemeral public key, recorded from the first envelope we opened.
    peer_eph: Option<[u8; 32]>,
    /// The thread tag this session is bound to, recorded at the first seal or open.
    thread: Option<[u8; 16]>,
    /// Counter of envelopes sealed; the next nonce is 16 zero bytes || this, big-endian.
    send_counter: u64,
    /// Derived keys, keyed by the full HKDF info (which determines the key).
    keys: BTreeMap<Vec<u8>, XChaCha20Poly1305>,
}

/// The fields every derived byte string of one envelope depends on.
struct Ctx<'a> {
    from: &'a Address,
    to: &'a Address,
    from_key: [u8; 32],
    to_key: [u8; 32],
    thread: [u8; 16],
    dir: Direction,
    /// The sender's ephemeral key (`env.eph`).
    eph: [u8; 32],
    /// The recipient's ephemeral key in "ee" mode (`env.peer_eph`); `None` in "es" mode.
    peer_eph: Option<[u8; 32]>,
}

impl Ctx<'_> {
    /// HKDF info: mode || dir || lp(from) || lp(to) || from_key || to_key || thread ||
    /// sender_eph [|| receiver_eph].
    fn kdf_info(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(256);
        b.extend_from_slice(match self.peer_eph {
            None => b"es",
            Some(_) => b"ee",
        });
        b.push(u8::from(self.dir));
        put_lp(&mut b, self.from.as_str().as_bytes());
        put_lp(&mut b, self.to.as_str().as_bytes());
        b.extend_from_slice(&self.from_key);
        b.extend_from_slice(&self.to_key);
        b.extend_from_slice(&self.thread);
        b.extend_from_slice(&self.eph);
        if let Some(p) = &self.peer_eph {
            b.extend_from_slice(p);
        }
        b
    }

    /// AEAD associated data: "A2ACP-AD-V1\0" || v || lp(from) || lp(to) || from_key ||
    /// to_key || thread || dir || eph || (0x00 | 0x01 || peer_eph).
    fn ad(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(256);
        b.extend_from_slice(AD_LABEL);
        b.push(ENVELOPE_VERSION);
        put_lp(&mut b, self.from.as_str().as_bytes());
        put_lp(&mut b, self.to.as_str().as_bytes());
        b.extend_from_slice(&self.from_key);
        b.extend_from_slice(&self.to_key);
        b.extend_from_slice(&self.thread);
        b.push(u8::from(self.dir));
        b.extend_from_slice(&self.eph);
        put_opt32(&mut b, &self.peer_eph);
        b
    }
}

/// The key of `ctx` from its agreement `ikm`, and the keys to cache: that one and, in
/// `ee` mode, the other direction's, which comes from the same agreement (X25519 of the
/// two ephemeral keys) — one agreement per thread for both `ee` directions.
#[allow(clippy::type_complexity)]
fn derive_keys(
    ikm: &[u8; 32],
    ctx: &Ctx<'_>,
) -> Result<(XChaCha20Poly1305, Vec<(Vec<u8>, XChaCha20Poly1305)>), CryptoError> {
    let info = ctx.kdf_info();
    let cipher = derive(ikm, &info)?;
    let mut learnt = vec![(info, cipher.clone())];
    if let Some(peer_eph) = ctx.peer_eph {
        let reverse = Ctx {
            from: ctx.to,
            to: ctx.from,
            from_key: ctx.to_key,
            to_key: ctx.from_key,
            thread: ctx.thread,
            dir: ctx.dir.reverse(),
            eph: peer_eph,
            peer_eph: Some(ctx.eph),
        }
        .kdf_info();
        let other = derive(ikm, &reverse)?;
        learnt.push((reverse, other));
    }
    Ok((cipher, learnt))
}

/// HKDF-SHA256(salt = "A2ACP-KDF-V1", ikm, info) → 32-byte XChaCha20-Poly1305 key.
fn derive(ikm: &[u8; 32], info: &[u8]) -> Result<XChaCha20Poly1305, CryptoError> {
    let hk = Hkdf::<Sha256>::new(Some(KDF_SALT), ikm);
    let mut okm = [0u8; 32];
    hk.expand(info, &mut okm)
        .map_err(|_| CryptoError::Malformed("hkdf output length"))?;
    Ok(cipher_from_key(&okm))
}

/// The 24-byte nonce for send counter `n`: 16 zero bytes || n as u64 big-endian.
fn nonce_for(n: u64) -> [u8; 24] {
    let mut nonce = [0u8; 24];
    nonce[16..].copy_from_slice(&n.to_be_bytes());
    nonce
}

impl ThreadSession {
    /// A session with the given ephemeral X25519 secret (32 bytes from the agent's
    /// deterministic generator; clamped on use).
    pub fn new(eph_secret: [u8; 32]) -> Self {
        let secret = StaticSecret::from(eph_secret);
        let eph_public = x25519_dalek::PublicKey::from(&secret).to_bytes();
        ThreadSession {
            eph_secret: Some(secret),
            eph_public,
            peer_eph: None,
            thread: None,
            send_counter: 0,
            keys: BTreeMap::new(),
        }
    }

    /// Our ephemeral X25519 public key for this thread.
    pub fn my_eph_public(&self) -> [u8; 32] {
        self.eph_public
    }

    /// The peer's ephemeral public key, once an envelope from the peer has been opened.
    pub fn peer_eph(&self) -> Option<[u8; 32]> {
        self.peer_eph
    }

    /// The number of envelopes sealed so far (the counter of the next nonce).
    pub fn send_counter(&self) -> u64 {
        self.send_counter
    }

    /// Whether [`ThreadSession::erase`] has been called.
    pub fn is_erased(&self) -> bool {
        self.eph_secret.is_none()
    }

    /// Seals `packet` for `to` in thread `thread_id`, sent in direction `dir`.
    ///
    /// Uses "es" mode (to `to_key`'s static X25519 key) until the peer's ephemeral key is
    /// known, "ee" mode afterwards. On success the send counter advances and the session
    /// is bound to the thread; on error the session is unchanged.
    #[allow(clippy::too_many_arguments)]
    pub fn seal(
        &mut self,
        me: &IdentityKey,
        from: &Address,
        to: &Address,
        to_key: &PublicKey,
        thread_id: &str,
        dir: Direction,
        packet: &[u8],
    ) -> Result<Envelope, CryptoError> {
        let secret = self.eph_secret.as_ref().ok_or(CryptoError::SessionErased)?;
        check_lp(thread_id.as_bytes(), "thread id")?;
        check_lp(packet, "packet")?;
        let tag = thread_tag(thread_id);
        if self.thread.is_some_and(|t| t != tag) {
            return Err(CryptoError::ThreadTagMismatch);
        }
        let next = self
            .send_counter
            .checked_add(1)
            .ok_or(CryptoError::CounterExhausted)?;
        let nonce = nonce_for(self.send_counter);
        let ctx = Ctx {
            from,
            to,
            from_key: me.public_ref().to_bytes(),
            to_key: to_key.to_bytes(),
            thread: tag,
            dir,
            eph: self.eph_public,
            peer_eph: self.peer_eph,
        };
        let (cipher, learnt) = match self.keys.get(&ctx.kdf_info()) {
            Some(c) => (c.clone(), Vec::new()),
            None => {
                let ikm = match &self.peer_eph {
                    None => agree_with(secret, &to_key.to_x25519())?,
                    Some(p) => agree_with(secret, p)?,
                };
                derive_keys(&ikm, &ctx)?
            }
        };
        let mut pt = Vec::with_capacity(4 + thread_id.len() + packet.len());
        put_lp(&mut pt, thread_id.as_bytes());
        pt.extend_from_slice(packet);
        let ct = seal_with(&cipher, &nonce, &ctx.ad(), &pt)?;
        check_lp(&ct, "ciphertext")?;
        let mut env = Envelope {
            v: ENVELOPE_VERSION,
            from: from.clone(),
            to: to.clone(),
            from_key: ctx.from_key,
            thread: tag,
            dir,
            eph: self.eph_public,
            peer_eph: self.peer_eph,
            nonce,
            ct,
            sig: [0u8; 64],
            rotation: None,
            earlier_rotations: Vec::new(),
        };
        env.sig = me.sign(&env.signed_bytes());
        // Commit.
        self.send_counter = next;
        self.thread = Some(tag);
        for (info, cipher) in learnt {
            self.remember(info, cipher);
        }
        Ok(env)
    }

    /// Opens an envelope addressed to `my_address` from the holder of `sender_key`,
    /// expected to travel in direction `expected_dir`.
    ///
    /// Checks, in order: session not erased, `v == 1`, `to == my_address`,
    /// `from_key == sender_key`, `dir == expected_dir`, the outer signature (unless the
    /// AEAD authenticates the sender, see below), that a `peer_eph` in the envelope is our
    /// ephemeral key, that `eph` equals the peer ephemeral key recorded earlier, that the
    /// envelope is for the thread this session is bound to, the key agreement
    /// (contributory), AEAD decryption, and that the inner thread id hashes to `thread`.
    /// Only when all pass is the peer's ephemeral key recorded and the session bound to
    /// the thread; on any error the session is left exactly unchanged.
    ///
    /// The outer signature is not checked again for an `ee` envelope once this session
    /// has recorded the peer's ephemeral key (from an envelope whose signature it
    /// checked): its key is `X25519` of the two ephemeral secrets, which only the peer and
    /// this session hold, so a successful AEAD open proves the peer sealed it (the relay
    /// still checks every signature). docs/protocol.md "Opening (recipient), in order".
    pub fn open(
        &mut self,
        me: &IdentityKey,
        my_address: &Address,
        env: &Envelope,
        sender_key: &PublicKey,
        expected_dir: Direction,
    ) -> Result<Opened, CryptoError> {
        let secret = self.eph_secret.as_ref().ok_or(CryptoError::SessionErased)?;
        if env.v != ENVELOPE_VERSION {
            return Err(CryptoError::UnsupportedVersion(env.v));
        }
        if env.to != *my_address {
            return Err(CryptoError::WrongRecipient);
        }
        if env.from_key != sender_key.to_bytes() {
            return Err(CryptoError::WrongSenderKey);
        }
        if env.dir != expected_dir {
            return Err(CryptoError::WrongDirection);
        }
        if env.peer_eph.is_none() || self.peer_eph.is_none() {
            check_outer_sig(env, sender_key)?;
        }
        if env.peer_eph.is_some_and(|x| x != self.eph_public) {
            return Err(CryptoError::UnknownEphemeral);
        }
        if self.peer_eph.is_some_and(|p| p != env.eph) {
            return Err(CryptoError::PeerEphemeralChanged);
        }
        if self.thread.is_some_and(|t| t != env.thread) {
            return Err(CryptoError::ThreadTagMismatch);
        }
        let ctx = Ctx {
            from: &env.from,
            to: &env.to,
            from_key: env.from_key,
            to_key: me.public_ref().to_bytes(),
            thread: env.thread,
            dir: env.dir,
            eph: env.eph,
            peer_eph: env.peer_eph,
        };
        let (cipher, learnt) = match self.keys.get(&ctx.kdf_info()) {
            Some(c) => (c.clone(), Vec::new()),
            None => {
                let ikm = match env.peer_eph {
                    None => agree_with(&me.x25519_secret(), &env.eph)?,
                    Some(_) => agree_with(secret, &env.eph)?,
                };
                derive_keys(&ikm, &ctx)?
            }
        };
        let pt = open_with(&cipher, &env.nonce, &ctx.ad(), &env.ct)?;
        let (len, rest) = pt
            .split_first_chunk::<4>()
            .ok_or(CryptoError::Malformed("plaintext has no thread id length"))?;
        let len = usize::try_from(u32::from_be_bytes(*len))
            .map_err(|_| CryptoError::Malformed("thread id length"))?;
        let (thread_id, packet) = rest
            .split_at_checked(len)
            .ok_or(CryptoError::Malformed("thread id length exceeds plaintext"))?;
        let thread_id = std::str::from_utf8(thread_id)
            .map_err(|_| CryptoError::Malformed("thread id is not UTF-8"))?;
        if thread_tag(thread_id) != env.thread {
            return Err(CryptoError::ThreadTagMismatch);
        }
        let opened = Opened {
            thread_id: thread_id.to_owned(),
            packet: packet.to_vec(),
        };
        // Commit.
        if self.peer_eph.is_none() {
            self.peer_eph = Some(env.eph);
        }
        self.thread = Some(env.thread);
        for (info, cipher) in learnt {
            self.remember(info, cipher);
        }
        Ok(opened)
    }

    /// Forgets the ephemeral secret and every cached key (zeroised on drop). Called when a
    /// thread ends; later [`seal`](Self::seal) and [`open`](Self::open) fail with
    /// [`CryptoError::SessionErased`]. The public half, the peer's ephemeral key and the
    /// counter are kept.
    pub fn erase(&mut self) {
        self.eph_secret = None;
        self.keys.clear();
    }

    fn remember(&mut self, info: Vec<u8>, cipher: XChaCha20Poly1305) {
        if self.keys.len() >= KEY_CACHE_MAX {
            self.keys.clear();
        }
        self.keys.insert(info, cipher);
    }
}

impl PartialEq for ThreadSession {
    fn eq(&self, other: &Self) -> bool {
        self.eph_secret.as_ref().map(StaticSecret::as_bytes)
            == other.eph_secret.as_ref().map(StaticSecret::as_bytes)
            && self.eph_public == other.eph_public
            && self.peer_eph == other.peer_eph
            && self.thread == other.thread
            && self.send_counter == other.send_counter
    }
}

impl Eq for ThreadSession {}

impl fmt::Debug for ThreadSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadSession")
            .field("erased", &self.is_erased())
            .field("eph_public", &b64_encode(&self.eph_public))
            .field("peer_eph", &self.peer_eph.map(|p| b64_encode(&p)))
            .field("thread", &self.thread.map(|t| b64_encode(&t)))
            .field("send_counter", &self.send_counter)
            .finish_non_exhaustive()
    }
}

/// The persisted form of a [`ThreadSession`].
#[derive(Serialize, Deserialize)]
struct SessionRecord {
    #[serde(
        with = "b64_opt_array",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    eph_secret: Option<[u8; 32]>,
    #[serde(with = "b64_array")]
    eph_public: [u8; 32],
    #[serde(
        with = "b64_opt_array",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    peer_eph: Option<[u8; 32]>,
    #[serde(
        with = "b64_opt_array",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    thread: Option<[u8; 16]>,
    send_counter: u64,
}

impl Serialize for ThreadSession {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        SessionRecord {
            eph_secret: self.eph_secret.as_ref().map(StaticSecret::to_bytes),
            eph_public: self.eph_public,
            peer_eph: self.peer_eph,
            thread: self.thread,
            send_counter: self.send_counter,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ThreadSession {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = SessionRecord::deserialize(d)?;
        let eph_secret = r.eph_secret.map(StaticSecret::from);
        if let Some(s) = &eph_secret {
            if x25519_dalek::PublicKey::from(s).to_bytes() != r.eph_public {
                return Err(serde::de::Error::custom(
                    "eph_public does not match eph_secret",
                ));
            }
        }
        Ok(ThreadSession {
            eph_secret,
            eph_public: r.eph_public,
            peer_eph: r.peer_eph,
            thread: r.thread,
            send_counter: r.send_counter,
            keys: BTreeMap::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::primitives::agree;
    use Direction::{FromInitiator as FI, FromResponder as FR};

    struct Party {
        id: IdentityKey,
        addr: Address,
    }

    impl Party {
        fn new(name: &str, seed: u8) -> Self {
            Party {
                id: IdentityKey::from_seed([seed; 32]),
                addr: Address::new(name, "a2acp.io").unwrap(),
            }
        }
        fn key(&self) -> PublicKey {
            self.id.public()
        }
    }

    fn parties() -> (Party, Party, Party) {
        (
            Party::new("alice", 1),
            Party::new("bob", 2),
            Party::new("carol", 3),
        )
    }

    fn seal(
        s: &mut ThreadSession,
        from: &Party,
        to: &Party,
        tid: &str,
        dir: Direction,
        p: &[u8],
    ) -> Envelope {
        s.seal(&from.id, &from.addr, &to.addr, &to.key(), tid, dir, p)
            .unwrap()
    }

    fn open(
        s: &mut ThreadSession,
        me: &Party,
        from: &Party,
        env: &Envelope,
        dir: Direction,
    ) -> Result<Opened, CryptoError> {
        s.open(&me.id, &me.addr, env, &from.key(), dir)
    }

    /// Opening must fail with `err` and leave the session exactly as it was.
    fn refused(
        s: &mut ThreadSession,
        me: &Party,
        from: &Party,
        env: &Envelope,
        dir: Direction,
        err: CryptoError,
    ) {
        let before = s.clone();
        let before_json = serde_json::to_string(&*s).unwrap();
        let before_keys = s.keys.len();
        assert_eq!(open(s, me, from, env, dir), Err(err));
        assert_eq!(*s, before);
        assert_eq!(serde_json::to_string(&*s).unwrap(), before_json);
        assert_eq!(s.keys.len(), before_keys);
    }

    #[test]
    fn round_trip_es_then_ee_both_directions() {
        let (a, b, _) = parties();
        let mut sa = ThreadSession::new([11; 32]);
        let mut sb = ThreadSession::new([12; 32]);

        // First flight(s): es mode, to B's static key.
        let e1 = seal(&mut sa, &a, &b, "thr_1", FI, b"hello");
        let e2 = seal(&mut sa, &a, &b, "thr_1", FI, b"again");
        assert_eq!(e1.peer_eph, None);
        assert_eq!(e1.eph, sa.my_eph_public());
        assert_eq!(e1.nonce, nonce_for(0));
        assert_eq!(e2.nonce, nonce_for(1));
        assert_eq!(e1.thread, thread_tag("thr_1"));
        assert_eq!(sa.keys.len(), 1, "one agreement for the es direction");
        assert_eq!(crate::crypto::verify_envelope(&e1, &a.key()), Ok(()));

        let o = open(&mut sb, &b, &a, &e1, FI).unwrap();
        assert_eq!(
            o,
            Opened {
                thread_id: "thr_1".into(),
                packet: b"hello".to_vec()
            }
        );
        assert_eq!(sb.peer_eph(), Some(sa.my_eph_public()));
        assert_eq!(open(&mut sb, &b, &a, &e2, FI).unwrap().packet, b"again");
        // Replays are accepted by the crypto layer (packet ids dedupe above it).
        assert_eq!(open(&mut sb, &b, &a, &e1, FI).unwrap().packet, b"hello");
        assert_eq!(sb.keys.len(), 1);

        // B replies: ee mode.
        let r1 = seal(&mut sb, &b, &a, "thr_1", FR, b"hi alice");
        let r2 = seal(&mut sb, &b, &a, "thr_1", FR, b"");
        assert_eq!(r1.peer_eph, Some(sa.my_eph_public()));
        assert_eq!(r1.eph, sb.my_eph_public());
        // es A->B, and both ee keys from one agreement of the two ephemeral keys.
        assert_eq!(sb.keys.len(), 3);
        assert_eq!(open(&mut sa, &a, &b, &r1, FR).unwrap().packet, b"hi alice");
        assert_eq!(sa.peer_eph(), Some(sb.my_eph_public()));
        assert_eq!(open(&mut sa, &a, &b, &r2, FR).unwrap().packet, b"");

        // A now seals in ee mode too.
        let e3 = seal(&mut sa, &a, &b, "thr_1", FI, b"third");
        assert_eq!(e3.peer_eph, Some(sb.my_eph_public()));
        assert_eq!(e3.nonce, nonce_for(2));
        assert_eq!(open(&mut sb, &b, &a, &e3, FI).unwrap().packet, b"third");
        // A late es-mode first flight still opens after ee is established.
        assert_eq!(open(&mut sb, &b, &a, &e2, FI).unwrap().packet, b"again");
        // At most one key per (mode, direction).
        assert_eq!(sa.keys.len(), 3);
        assert_eq!(sb.keys.len(), 3);
        for _ in 0..5 {
            let e = seal(&mut sa, &a, &b, "thr_1", FI, b"x");
            open(&mut sb, &b, &a, &e, FI).unwrap();
        }
        assert_eq!(sa.keys.len(), 3);
        assert_eq!(sb.keys.len(), 3);
        assert_eq!(sa.send_counter(), 8);
    }

    #[test]
    fn keys_are_directional_and_fresh_per_thread() {
        let (a, b, _) = parties();
        let mut sa = ThreadSession::new([11; 32]);
        let mut sb = ThreadSession::new([12; 32]);
        let e = seal(&mut sa, &a, &b, "thr_1", FI, b"same");
        open(&mut sb, &b, &a, &e, FI).unwrap();
        let r = seal(&mut sb, &b, &a, "thr_1", FR, b"same");
        let ka: Vec<_> = sa.keys.keys().cloned().collect();
        let kb: Vec<_> = sb.keys.keys().cloned().collect();
        assert_eq!(ka.len(), 1);
        assert_eq!(kb.len(), 3);
        // Both sides derived the same A->B key; B->A has its own.
        assert!(kb.contains(&ka[0]));
        let b_to_a = kb.iter().find(|k| k.starts_with(b"ee\x01")).unwrap();
        // B's one ee agreement also gave the A->B ee key, which A derives on opening.
        let a_to_b_ee = kb.iter().find(|k| k.starts_with(b"ee\x00")).unwrap();
        open(&mut sa, &a, &b, &r, FR).unwrap();
        assert!(sa.keys.contains_key(a_to_b_ee) && sa.keys.contains_key(b_to_a));
        assert_eq!(&ka[0][..3], b"es\x00");
        let k_ab = &sa.keys[&ka[0]];
        let k_ba = &sb.keys[b_to_a];
        let pt = seal_with(k_ab, &nonce_for(0), b"", b"x").unwrap();
        assert!(open_with(k_ba, &nonce_for(0), b"", &pt).is_err());
        assert_ne!(e.ct, r.ct);
        // A second thread between the same parties derives unrelated keys.
        let mut sa2 = ThreadSession::new([13; 32]);
        seal(&mut sa2, &a, &b, "thr_2", FI, b"same");
        assert!(sa2.keys.keys().all(|k| !ka.contains(k)));
    }

    #[test]
    fn tampering_any_field_is_refused_and_session_unchanged() {
        let (a, b, c) = parties();
        let mut sa = ThreadSession::new([11; 32]);
        let mut sb = ThreadSession::new([12; 32]);
        let es = seal(&mut sa, &a, &b, "thr_1", FI, b"first");
        // Check es-mode tampering against a fresh B session (no peer recorded yet).
        let mut fresh_b = sb.clone();
        tamper_all(&mut fresh_b, &b, &a, &c, &es, FI);
        open(&mut sb, &b, &a, &es, FI).unwrap();
        let ee = seal(&mut sb, &b, &a, "thr_1", FR, b"reply");
        // ee-mode tampering against A (B's ephemeral not yet recorded) ...
        let mut sa_before = sa.clone();
        tamper_all(&mut sa_before, &a, &b, &c, &ee, FR);
        open(&mut sa, &a, &b, &ee, FR).unwrap();
        // ... and after it is recorded.
        let ee2 = seal(&mut sb, &b, &a, "thr_1", FR, b"reply 2");
        tamper_all(&mut sa, &a, &b, &c, &ee2, FR);
    }

    /// Every single-field change of `env` is refused by `me`'s session, which is left
    /// unchanged; the original then still opens.
    fn tamper_all(
        s: &mut ThreadSession,
        me: &Party,
        from: &Party,
        other: &Party,
        env: &Envelope,
        dir: Direction,
    ) {
        use CryptoError::*;
        // The recipient checks the outer signature unless the envelope is `ee` and its
        // session already recorded the sender's ephemeral key: then the AEAD
        // authenticates, and a change the signature would have caught is caught by a
        // later check (named in `or`).
        let checks_sig = env.peer_eph.is_none() || s.peer_eph.is_none();
        let sig_or = |later: CryptoError| if checks_sig { BadSignature } else { later };
        let t = |f: &dyn Fn(&mut Envelope)| {
            let mut e = env.clone();
            f(&mut e);
            assert_ne!(&e, env);
            e
        };
        let s_ = &mut *s;
        refused(s_, me, from, &t(&|e| e.v = 2), dir, UnsupportedVersion(2));
        refused(s_, me, from, &t(&|e| e.v = 0), dir, UnsupportedVersion(0));
        refused(
            s_,
            me,
            from,
            &t(&|e| e.from = other.addr.clone()),
            dir,
            sig_or(DecryptFailed),
        );
        refused(
            s_,
            me,
            from,
            &t(&|e| e.to = other.addr.clone()),
            dir,
            WrongRecipient,
        );
        refused(
            s_,
            me,
            from,
            &t(&|e| e.from_key = other.key().to_bytes()),
            dir,
            WrongSenderKey,
        );
        // A different key whose holder re-signs: the relay-level check passes, but the
        // session was asked to expect `from`'s key.
        let mut resigned = t(&|e| e.from_key = other.key().to_bytes());
        resigned.sig = other.id.sign(&resigned.signed_bytes());
        refused(s_, me, from, &resigned, dir, WrongSenderKey);
        // Opened as if from `other`: outer signature fine, AEAD key differs.
        let r = s_.clone();
        assert!(s_
            .open(&me.id, &me.addr, &resigned, &other.key(), dir)
            .is_err());
        assert_eq!(*s_, r);
        let tag_err = if s_.thread.is_some() {
            ThreadTagMismatch
        } else {
            DecryptFailed
        };
        refused(
            s_,
            me,
            from,
            &t(&|e| e.thread[0] ^= 1),
            dir,
            sig_or(tag_err),
        );
        refused(
            s_,
            me,
            from,
            &t(&|e| e.dir = e.dir.reverse()),
            dir,
            WrongDirection,
        );
        refused(
            s_,
            me,
            from,
            &t(&|e| e.dir = e.dir.reverse()),
            dir.reverse(),
            sig_or(DecryptFailed),
        );
        refused(s_, me, from, &env.clone(), dir.reverse(), WrongDirection);
        refused(
            s_,
            me,
            from,
            &t(&|e| e.eph[3] ^= 0x10),
            dir,
            sig_or(PeerEphemeralChanged),
        );
        refused(
            s_,
            me,
            from,
            &t(&|e| {
                e.peer_eph = match e.peer_eph {
                    None => Some(s_.my_eph_public()),
                    Some(_) => None,
                }
            }),
            dir,
            BadSignature,
        );
        refused(
            s_,
            me,
            from,
            &t(&|e| e.peer_eph = Some([9; 32])),
            dir,
            sig_or(UnknownEphemeral),
        );
        let aead = sig_or(DecryptFailed);
        refused(s_, me, from, &t(&|e| e.nonce[23] ^= 1), dir, aead.clone());
        refused(s_, me, from, &t(&|e| e.nonce[0] ^= 1), dir, aead.clone());
        refused(s_, me, from, &t(&|e| e.ct[0] ^= 1), dir, aead.clone());
        refused(
            s_,
            me,
            from,
            &t(&|e| {
                e.ct.pop();
            }),
            dir,
            aead.clone(),
        );
        refused(s_, me, from, &t(&|e| e.ct.push(0)), dir, aead.clone());
        refused(s_, me, from, &t(&|e| e.ct.clear()), dir, aead);
        for flip in [
            |e: &mut Envelope| e.sig[0] ^= 1,
            |e: &mut Envelope| e.sig[63] ^= 0x80,
        ] {
            if checks_sig {
                refused(s_, me, from, &t(&flip), dir, BadSignature);
            } else {
                // Only the signature changed and the recipient does not check it here:
                // the (authentic) packet opens as the original does.
                let mut copy = s_.clone();
                assert_eq!(
                    open(&mut copy, me, from, &t(&flip), dir).unwrap(),
                    open(&mut s_.clone(), me, from, env, dir).unwrap()
                );
                assert_eq!(copy, *s_);
            }
        }
        // Wrong identity / address on our side.
        let r = s_.clone();
        assert_eq!(
            s_.open(&me.id, &other.addr, env, &from.key(), dir),
            Err(WrongRecipient)
        );
        assert_eq!(*s_, r);

        // A sender who re-signs its own tampered envelope (or a bug) is caught by the
        // AEAD associated data / key derivation instead.
        let resign = |e: &mut Envelope| e.sig = from.id.sign(&e.signed_bytes());
        refused(
            s_,
            me,
            from,
            &t(&|e| {
                e.nonce[23] ^= 1;
                resign(e)
            }),
            dir,
            DecryptFailed,
        );
        refused(
            s_,
            me,
            from,
            &t(&|e| {
                e.ct[1] ^= 1;
                resign(e)
            }),
            dir,
            DecryptFailed,
        );
        refused(
            s_,
            me,
            from,
            &t(&|e| {
                e.ct.truncate(15);
                resign(e)
            }),
            dir,
            DecryptFailed,
        );
        if s_.thread.is_none() {
            refused(
                s_,
                me,
                from,
                &t(&|e| {
                    e.thread[5] ^= 1;
                    resign(e)
                }),
                dir,
                DecryptFailed,
            );
        } else {
            refused(
                s_,
                me,
                from,
                &t(&|e| {
                    e.thread[5] ^= 1;
                    resign(e)
                }),
                dir,
                ThreadTagMismatch,
            );
        }
        refused(
            s_,
            me,
            from,
            &t(&|e| {
                e.from = other.addr.clone();
                resign(e)
            }),
            dir,
            DecryptFailed,
        );
        if s_.peer_eph.is_none() {
            refused(
                s_,
                me,
                from,
                &t(&|e| {
                    e.eph[0] ^= 0x20;
                    resign(e)
                }),
                dir,
                DecryptFailed,
            );
        } else {
            refused(
                s_,
                me,
                from,
                &t(&|e| {
                    e.eph[0] ^= 0x20;
                    resign(e)
                }),
                dir,
                PeerEphemeralChanged,
            );
        }
        refused(
            s_,
            me,
            from,
            &t(&|e| {
                e.peer_eph = Some([9; 32]);
                resign(e)
            }),
            dir,
            UnknownEphemeral,
        );
        if env.peer_eph.is_some() {
            refused(
                s_,
                me,
                from,
                &t(&|e| {
                    e.peer_eph = None;
                    resign(e)
                }),
                dir,
                DecryptFailed,
            );
        } else {
            let mine = s_.my_eph_public();
            refused(
                s_,
                me,
                from,
                &t(&|e| {
                    e.peer_eph = Some(mine);
                    resign(e)
                }),
                dir,
                DecryptFailed,
            );
        }

        // The original still opens.
        assert!(open(s_, me, from, env, dir).is_ok());
    }

    #[test]
    fn reflection_is_refused() {
        let (a, b, _) = parties();
        let mut sa = ThreadSession::new([11; 32]);
        let mut sb = ThreadSession::new([12; 32]);
        let e = seal(&mut sa, &a, &b, "thr_1", FI, b"hello");
        // Sent back to A as if it came from B, or from A itself.
        refused(&mut sa, &a, &b, &e, FR, CryptoError::WrongRecipient);
        refused(&mut sa, &a, &a, &e, FR, CryptoError::WrongRecipient);
        open(&mut sb, &b, &a, &e, FI).unwrap();
        let r = seal(&mut sb, &b, &a, "thr_1", FR, b"reply");
        refused(&mut sb, &b, &b, &r, FI, CryptoError::WrongRecipient);

        // A thread with oneself: addresses match, so the direction catches reflection.
        let mut s1 = ThreadSession::new([21; 32]);
        let e = seal(&mut s1, &a, &a, "thr_self", FI, b"note");
        refused(&mut s1, &a, &a, &e, FR, CryptoError::WrongDirection);
        // Even with the direction flipped by a re-signing sender, the keys/AD differ.
        let mut flipped = e.clone();
        flipped.dir = FR;
        flipped.sig = a.id.sign(&flipped.signed_bytes());
        let mut s2 = ThreadSession::new([22; 32]);
        refused(&mut s2, &a, &a, &flipped, FR, CryptoError::DecryptFailed);
    }

    #[test]
    fn cross_thread_replay_is_refused() {
        let (a, b, _) = parties();
        let mut a1 = ThreadSession::new([31; 32]);
        let mut a2 = ThreadSession::new([32; 32]);
        let mut b1 = ThreadSession::new([33; 32]);
        let mut b2 = ThreadSession::new([34; 32]);
        let t1 = seal(&mut a1, &a, &b, "thr_one", FI, b"for thread one");
        let t2 = seal(&mut a2, &a, &b, "thr_two", FI, b"for thread two");
        open(&mut b1, &b, &a, &t1, FI).unwrap();
        open(&mut b2, &b, &a, &t2, FI).unwrap();
        // es-mode envelope of thread one replayed into thread two's session.
        refused(&mut b2, &b, &a, &t1, FI, CryptoError::PeerEphemeralChanged);
        // Retagging breaks the outer signature.
        let mut retag = t1.clone();
        retag.thread = thread_tag("thr_two");
        refused(&mut b2, &b, &a, &retag, FI, CryptoError::BadSignature);
        // ee-mode envelopes name the other thread's ephemeral.
        let r1 = seal(&mut b1, &b, &a, "thr_one", FR, b"r1");
        open(&mut a1, &a, &b, &r1, FR).unwrap();
        refused(&mut a2, &a, &b, &r1, FR, CryptoError::UnknownEphemeral);
        let e1 = seal(&mut a1, &a, &b, "thr_one", FI, b"ee one");
        refused(&mut b2, &b, &a, &e1, FI, CryptoError::UnknownEphemeral);
        // A session bound to a thread refuses to seal for another.
        assert_eq!(
            a1.seal(&a.id, &a.addr, &b.addr, &b.key(), "thr_two", FI, b"x"),
            Err(CryptoError::ThreadTagMismatch)
        );
        // A session bound to thread two, same peer ephemeral (the replay reuses thread
        // two's sender session), thread one's tag: refused by the binding.
        let mut b2_copy = ThreadSession::new([35; 32]);
        let mut a_sess = ThreadSession::new([36; 32]);
        let x2 = seal(&mut a_sess, &a, &b, "thr_two", FI, b"two");
        open(&mut b2_copy, &b, &a, &x2, FI).unwrap();
        let mut a_sess_forked = a_sess.clone();
        a_sess_forked.thread = None;
        let x1 = seal(&mut a_sess_forked, &a, &b, "thr_one", FI, b"one");
        refused(
            &mut b2_copy,
            &b,
            &a,
            &x1,
            FI,
            CryptoError::ThreadTagMismatch,
        );
    }

    /// What B (or C holding B's plaintext) can build from A's plaintext: the same
    /// plaintext re-encrypted in es mode to `to`, claiming to come from A.
    fn rewrap(
        plaintext: &[u8],
        orig: &Envelope,
        from_addr: &Address,
        from_key: &PublicKey,
        to: &Party,
        eph_secret: [u8; 32],
        outer_signer: &IdentityKey,
    ) -> Envelope {
        let secret = StaticSecret::from(eph_secret);
        let eph = x25519_dalek::PublicKey::from(&secret).to_bytes();
        let ctx = Ctx {
            from: from_addr,
            to: &to.addr,
            from_key: from_key.to_bytes(),
            to_key: to.key().to_bytes(),
            thread: orig.thread,
            dir: orig.dir,
            eph,
            peer_eph: None,
        };
        let ikm = agree(&eph_secret, &to.key().to_x25519()).unwrap();
        let cipher = derive(&ikm, &ctx.kdf_info()).unwrap();
        let nonce = nonce_for(0);
        let ct = seal_with(&cipher, &nonce, &ctx.ad(), plaintext).unwrap();
        let mut env = Envelope {
            v: 1,
            from: from_addr.clone(),
            to: to.addr.clone(),
            from_key: from_key.to_bytes(),
            thread: orig.thread,
            dir: orig.dir,
            eph,
            peer_eph: None,
            nonce,
            ct,
            sig: [0; 64],
            rotation: None,
            earlier_rotations: Vec::new(),
        };
        env.sig = outer_signer.sign(&env.signed_bytes());
        env
    }

    /// B's view of the AEAD plaintext of an es envelope addressed to B.
    fn plaintext_at(me: &Party, env: &Envelope) -> Vec<u8> {
        let ctx = Ctx {
            from: &env.from,
            to: &env.to,
            from_key: env.from_key,
            to_key: me.key().to_bytes(),
            thread: env.thread,
            dir: env.dir,
            eph: env.eph,
            peer_eph: env.peer_eph,
        };
        let ikm = agree(&me.id.x25519_secret().to_bytes(), &env.eph).unwrap();
        let cipher = derive(&ikm, &ctx.kdf_info()).unwrap();
        open_with(&cipher, &env.nonce, &ctx.ad(), &env.ct).unwrap()
    }

    #[test]
    fn surreptitious_forwarding_is_refused() {
        let (a, b, c) = parties();
        let mut sa = ThreadSession::new([41; 32]);
        let e = seal(&mut sa, &a, &b, "thr_1", FI, b"for bob only");
        let pt = plaintext_at(&b, &e);
        assert_eq!(&pt[..], b"\0\0\0\x05thr_1for bob only");

        // B (or C, given B's plaintext) re-encrypts it to C as if from A. Only A can sign
        // an envelope from A, and the signature covers the new ciphertext, whose AD names
        // C's key: refused whoever signs it.
        let mut sc = ThreadSession::new([42; 32]);
        let forged = rewrap(&pt, &e, &a.addr, &a.key(), &c, [43; 32], &c.id);
        refused(&mut sc, &c, &a, &forged, FI, CryptoError::BadSignature);
        let forged = rewrap(&pt, &e, &a.addr, &a.key(), &c, [43; 32], &b.id);
        refused(&mut sc, &c, &a, &forged, FI, CryptoError::BadSignature);
        // A's envelope itself, redirected to C: the signature covers `to`.
        let mut redirected = e.clone();
        redirected.to = c.addr.clone();
        refused(&mut sc, &c, &a, &redirected, FI, CryptoError::BadSignature);
        assert_eq!(sc, ThreadSession::new([42; 32]));
    }

    #[test]
    fn ee_envelopes_are_authenticated_by_the_aead() {
        use CryptoError::*;
        let (a, b, c) = parties();
        let mut sa = ThreadSession::new([81; 32]);
        let mut sb = ThreadSession::new([82; 32]);
        let e = seal(&mut sa, &a, &b, "thr_1", FI, b"hello");
        open(&mut sb, &b, &a, &e, FI).unwrap();
        let r = seal(&mut sb, &b, &a, "thr_1", FR, b"reply");
        // A learns B's ephemeral key from this envelope: its signature is checked.
        let mut bad = r.clone();
        bad.sig[5] ^= 1;
        refused(&mut sa, &a, &b, &bad, FR, BadSignature);
        open(&mut sa, &a, &b, &r, FR).unwrap();

        // From now on A does not check B's signature on `ee` envelopes. C knows both
        // ephemeral public keys but neither secret: whatever key it seals under, A's
        // agreement X25519(A eph, B eph) differs.
        let c_secret = StaticSecret::from([83; 32]);
        let ctx = Ctx {
            from: &b.addr,
            to: &a.addr,
            from_key: b.key().to_bytes(),
            to_key: a.key().to_bytes(),
            thread: r.thread,
            dir: FR,
            eph: r.eph,
            peer_eph: r.peer_eph,
        };
        let ikm = agree_with(&c_secret, &r.peer_eph.unwrap()).unwrap();
        let cipher = derive(&ikm, &ctx.kdf_info()).unwrap();
        let mut pt = Vec::new();
        put_lp(&mut pt, b"thr_1");
        pt.extend_from_slice(b"forged");
        let mut forged = r.clone();
        forged.nonce = nonce_for(7);
        forged.ct = seal_with(&cipher, &forged.nonce, &ctx.ad(), &pt).unwrap();
        forged.sig = c.id.sign(&forged.signed_bytes());
        refused(&mut sa, &a, &b, &forged, FR, DecryptFailed);
        // With its own ephemeral key (so that it could derive the key): not B's.
        let mut own = forged.clone();
        own.eph = x25519_dalek::PublicKey::from(&c_secret).to_bytes();
        own.sig = c.id.sign(&own.signed_bytes());
        refused(&mut sa, &a, &b, &own, FR, PeerEphemeralChanged);
        // In `es` mode anyone can derive a key to A's static key: the signature is checked.
        let es = rewrap(&pt, &r, &b.addr, &b.key(), &a, [84; 32], &c.id);
        refused(&mut sa, &a, &b, &es, FR, BadSignature);
        // B's real envelopes keep opening.
        let r2 = seal(&mut sb, &b, &a, "thr_1", FR, b"reply 2");
        assert_eq!(open(&mut sa, &a, &b, &r2, FR).unwrap().packet, b"reply 2");
    }

    #[test]
    fn inner_thread_id_must_match_tag() {
        let (a, b, _) = parties();
        // A buggy or malicious sender seals a plaintext whose thread id does not hash to
        // the envelope's tag.
        let orig = seal(&mut ThreadSession::new([51; 32]), &a, &b, "thr_1", FI, b"p");
        let eph_secret = [52u8; 32];
        let mut pt = Vec::new();
        put_lp(&mut pt, b"thr_2");
        pt.extend_from_slice(b"p");
        let env = rewrap(&pt, &orig, &a.addr, &a.key(), &b, eph_secret, &a.id);
        let mut sb = ThreadSession::new([53; 32]);
        refused(&mut sb, &b, &a, &env, FI, CryptoError::ThreadTagMismatch);

        // Malformed plaintexts.
        for bad in [
            vec![],
            vec![0u8; 3],
            {
                let mut v = 100u32.to_be_bytes().to_vec();
                v.extend_from_slice(b"short");
                v
            },
            {
                let mut v = Vec::new();
                put_lp(&mut v, &[0xff, 0xfe]);
                v
            },
        ] {
            let env = rewrap(&bad, &orig, &a.addr, &a.key(), &b, eph_secret, &a.id);
            let before = sb.clone();
            assert!(matches!(
                open(&mut sb, &b, &a, &env, FI),
                Err(CryptoError::Malformed(_))
            ));
            assert_eq!(sb, before);
        }
    }

    #[test]
    fn low_order_ephemerals_are_refused() {
        let (a, b, _) = parties();
        let orig = seal(&mut ThreadSession::new([61; 32]), &a, &b, "thr_1", FI, b"p");
        let mut sb = ThreadSession::new([62; 32]);
        let mut one = [0u8; 32];
        one[0] = 1;
        for eph in [[0u8; 32], one] {
            // A validly signed envelope (a malicious sender) with a low-order ephemeral.
            let mut e = orig.clone();
            e.eph = eph;
            e.sig = a.id.sign(&e.signed_bytes());
            refused(&mut sb, &b, &a, &e, FI, CryptoError::NonContributory);
        }
        // And in ee mode on A's side.
        let mut sa = ThreadSession::new([63; 32]);
        let e = seal(&mut sa, &a, &b, "thr_1", FI, b"p");
        let mut sb = ThreadSession::new([64; 32]);
        open(&mut sb, &b, &a, &e, FI).unwrap();
        let mut r = seal(&mut sb, &b, &a, "thr_1", FR, b"r");
        r.eph = [0; 32];
        r.sig = b.id.sign(&r.signed_bytes());
        refused(&mut sa, &a, &b, &r, FR, CryptoError::NonContributory);
    }

    #[test]
    fn erase_forgets_secrets() {
        let (a, b, _) = parties();
        let mut sa = ThreadSession::new([71; 32]);
        let mut sb = ThreadSession::new([72; 32]);
        let e = seal(&mut sa, &a, &b, "thr_1", FI, b"p");
        open(&mut sb, &b, &a, &e, FI).unwrap();
        let r = seal(&mut sb, &b, &a, "thr_1", FR, b"r");
        let pub_a = sa.my_eph_public();
        sa.erase();
        assert!(sa.is_erased());
        assert!(sa.keys.is_empty());
        assert_eq!(sa.my_eph_public(), pub_a);
        assert_eq!(
            sa.seal(&a.id, &a.addr, &b.addr, &b.key(), "thr_1", FI, b"x"),
            Err(CryptoError::SessionErased)
        );
        refused(&mut sa, &a, &b, &r, FR, CryptoError::SessionErased);
        let j = serde_json::to_string(&sa).unwrap();
        assert!(!j.contains("eph_secret"));
        let mut restored: ThreadSession = serde_json::from_str(&j).unwrap();
        assert_eq!(restored, sa);
        refused(&mut restored, &a, &b, &r, FR, CryptoError::SessionErased);
        assert!(!format!("{sb:?}").contains(&b64_encode(&[72u8; 32])));
    }

    #[test]
    fn serde_round_trip_keeps_working() {
        let (a, b, _) = parties();
        let mut sa = ThreadSession::new([81; 32]);
        let mut sb = ThreadSession::new([82; 32]);
        let e = seal(&mut sa, &a, &b, "thr_1", FI, b"p1");
        let j = serde_json::to_vec(&sa).unwrap();
        let mut sa: ThreadSession = serde_json::from_slice(&j).unwrap();
        assert!(sa.keys.is_empty());
        open(&mut sb, &b, &a, &e, FI).unwrap();
        let mut sb: ThreadSession =
            serde_json::from_slice(&serde_json::to_vec(&sb).unwrap()).unwrap();
        let r = seal(&mut sb, &b, &a, "thr_1", FR, b"r1");
        assert_eq!(r.nonce, nonce_for(0));
        open(&mut sa, &a, &b, &r, FR).unwrap();
        let e2 = seal(&mut sa, &a, &b, "thr_1", FI, b"p2");
        assert_eq!(e2.nonce, nonce_for(1), "counter survives restore");
        let mut sb2: ThreadSession =
            serde_json::from_slice(&serde_json::to_vec(&sb).unwrap()).unwrap();
        assert_eq!(sb2, sb);
        assert_eq!(open(&mut sb2, &b, &a, &e2, FI).unwrap().packet, b"p2");
        // The thread binding is persisted too.
        assert_eq!(
            sb2.seal(&b.id, &b.addr, &a.addr, &a.key(), "thr_other", FR, b""),
            Err(CryptoError::ThreadTagMismatch)
        );
        // A record whose public key does not match its secret is refused.
        let mut v: serde_json::Value = serde_json::to_value(&sa).unwrap();
        v["eph_public"] = serde_json::Value::String(b64_encode(&[5u8; 32]));
        assert!(serde_json::from_value::<ThreadSession>(v).is_err());
    }

    #[test]
    fn envelope_json_round_trip() {
        let (a, b, _) = parties();
        let e = seal(&mut ThreadSession::new([91; 32]), &a, &b, "thr_1", FI, b"p");
        let j = e.to_json();
        assert_eq!(Envelope::from_json(&j).unwrap(), e);
        assert!(!String::from_utf8(j).unwrap().contains("peer_eph"));
        assert_eq!(
            Envelope::from_json(b"{\"v\":1}"),
            Err(CryptoError::Malformed("envelope json"))
        );
        assert!(Envelope::from_json(b"\xff").is_err());
    }
}

#[cfg(test)]
mod kat {
    //! The worked example of docs/protocol.md, pinned.
    use super::*;
    use crate::crypto::primitives::agree;

    fn seq(start: u8) -> [u8; 32] {
        let mut b = [0u8; 32];
        for (i, x) in b.iter_mut().enumerate() {
            *x = start + i as u8;
        }
        b
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn worked_example() {
        let alice = IdentityKey::from_seed(seq(0x00));
        let bob = IdentityKey::from_seed(seq(0x20));
        let a = Address::parse("agent:alice@a2acp.io").unwrap();
        let b = Address::parse("agent:bob@a2acp.io").unwrap();
        let mut sa = ThreadSession::new(seq(0x40));
        let mut sb = ThreadSession::new(seq(0x60));
        let tid = "thr_example";
        let p1 = br#"{"t":"hello"}"#;
        let p2 = br#"{"t":"ack"}"#;

        let e1 = sa
            .seal(
                &alice,
                &a,
                &b,
                &bob.public(),
                tid,
                Direction::FromInitiator,
                p1,
            )
            .unwrap();
        sb.open(&bob, &b, &e1, &alice.public(), Direction::FromInitiator)
            .unwrap();
        sb.seal(
            &bob,
            &b,
            &a,
            &alice.public(),
            tid,
            Direction::FromResponder,
            b"",
        )
        .unwrap();
        let e2 = sb
            .seal(
                &bob,
                &b,
                &a,
                &alice.public(),
                tid,
                Direction::FromResponder,
                p2,
            )
            .unwrap();
        sa.open(&alice, &a, &e2, &bob.public(), Direction::FromResponder)
            .unwrap();

        let ctx1 = Ctx {
            from: &a,
            to: &b,
            from_key: alice.public().to_bytes(),
            to_key: bob.public().to_bytes(),
            thread: e1.thread,
            dir: e1.dir,
            eph: e1.eph,
            peer_eph: None,
        };
        let ikm1 = agree(&seq(0x40), &bob.public().to_x25519()).unwrap();
        let ctx2 = Ctx {
            from: &b,
            to: &a,
            from_key: bob.public().to_bytes(),
            to_key: alice.public().to_bytes(),
            thread: e2.thread,
            dir: e2.dir,
            eph: e2.eph,
            peer_eph: e2.peer_eph,
        };
        let ikm2 = agree(&seq(0x60), &e1.eph).unwrap();
        let okm = |ikm: &[u8; 32], info: &[u8]| {
            let mut k = [0u8; 32];
            Hkdf::<Sha256>::new(Some(KDF_SALT), ikm)
                .expand(info, &mut k)
                .unwrap();
            k
        };
        let mut plaintext_at_alice_to_bob = Vec::new();
        put_lp(&mut plaintext_at_alice_to_bob, tid.as_bytes());
        plaintext_at_alice_to_bob.extend_from_slice(p1);
        let lines = [
            ("alice_ed25519_pk", hex(&alice.public().to_bytes())),
            ("alice_x25519_pk", hex(&alice.public().to_x25519())),
            ("alice_x25519_sk", hex(&alice.x25519_secret().to_bytes())),
            ("bob_ed25519_pk", hex(&bob.public().to_bytes())),
            ("bob_x25519_pk", hex(&bob.public().to_x25519())),
            ("alice_eph_pk", hex(&sa.my_eph_public())),
            ("bob_eph_pk", hex(&sb.my_eph_public())),
            ("thread_tag", hex(&e1.thread)),
            ("m1_ikm", hex(&ikm1)),
            ("m1_info", hex(&ctx1.kdf_info())),
            ("m1_key", hex(&okm(&ikm1, &ctx1.kdf_info()))),
            ("m1_nonce", hex(&e1.nonce)),
            ("m1_ad", hex(&ctx1.ad())),
            ("m1_plaintext", hex(&plaintext_at_alice_to_bob)),
            ("m1_ct", hex(&e1.ct)),
            ("m1_signed", hex(&e1.signed_bytes())),
            ("m1_sig", hex(&e1.sig)),
            ("m2_ikm", hex(&ikm2)),
            ("m2_info", hex(&ctx2.kdf_info())),
            ("m2_key", hex(&okm(&ikm2, &ctx2.kdf_info()))),
            ("m2_nonce", hex(&e2.nonce)),
            ("m2_ad", hex(&ctx2.ad())),
            ("m2_ct", hex(&e2.ct)),
            ("m2_sig", hex(&e2.sig)),
        ];
        // `cargo test worked_example -- --nocapture` prints the values of docs/protocol.md's
        // worked example.
        for (k, v) in &lines {
            println!("{k} = {v}");
        }
        let pinned = |k: &str| lines.iter().find(|(n, _)| *n == k).unwrap().1.clone();
        // Cross-checked against an independent libsodium 1.0.18 implementation.
        assert_eq!(
            pinned("alice_x25519_pk"),
            "4701d08488451f545a409fb58ae3e58581ca40ac3f7f114698cd71deac73ca01"
        );
        assert_eq!(pinned("thread_tag"), "79d256b2b1044d120a8b209f10409ea2");
        assert_eq!(
            pinned("m1_key"),
            "050cf9d47c93e72b33372682797f182d48e0df175f28f2f80336a6efd54d1739"
        );
        assert_eq!(
            pinned("m2_key"),
            "82e878de0c0e714d48af0708b1656d63c4195498d834917ebcd914abe1becbd0"
        );
        assert_eq!(
            String::from_utf8(e1.to_json()).unwrap(),
            concat!(
                r#"{"v":1,"from":"agent:alice@a2acp.io","to":"agent:bob@a2acp.io","#,
                r#""from_key":"A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg","#,
                r#""thread":"edJWsrEETRIKiyCfEECeog","dir":0,"#,
                r#""eph":"eaYx7t4b-cmPEgMs3q3Q56B5OY_HhriMyEbsia-FpRo","#,
                r#""nonce":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","#,
                r#""ct":"GuUMPBwJf0K4yTHDNyK7AKSb-BlxE2e1avRsh7W3yohakwvY6g7v3YzZ8gY","#,
                r#""sig":"2aWt1ktqV-5JAW0NegqDkxJ2iS9Bw5Zfq1RH30VL8k951K1UBjrF4Pisr_N_hhgbyhw3LDCUbPGYb5nbndgvDw"}"#
            )
        );
        assert_eq!(
            String::from_utf8(e2.to_json()).unwrap(),
            concat!(
                r#"{"v":1,"from":"agent:bob@a2acp.io","to":"agent:alice@a2acp.io","#,
                r#""from_key":"Kay64UG8yvCyLhqU000LxzYeUm0L_hLIl5S8kyKWbdc","#,
                r#""thread":"edJWsrEETRIKiyCfEECeog","dir":1,"#,
                r#""eph":"Z13VdO13iTELPS52gfN5C0ZsdzsVIf7PNld5WDcepS8","#,
                r#""peer_eph":"eaYx7t4b-cmPEgMs3q3Q56B5OY_HhriMyEbsia-FpRo","#,
                r#""nonce":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB","#,
                r#""ct":"RIgDQGv2mbEos9_yHhoxuQrLshEp_YTglnba2MToTzYUyirgcp5T7XiB","#,
                r#""sig":"xfWyxeYjVRrZmcsJooBRDYNX1YzkG2r47c5D67aL-2BdOe9p_XkMTFB-qtrcxcJ7hcJd_gATXcakHkKA_rYYDA"}"#
            )
        );
    }
}
