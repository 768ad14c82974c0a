//! The worked examples of docs/protocol.md (the wire format, moved there from SPEC-NOTES.md)
//! are produced by this code from the inputs the document states, so an independent
//! implementation can reproduce them byte for byte and the document cannot drift from the
//! implementation: each test builds a relay-link frame or an envelope and checks that
//! docs/protocol.md holds exactly its JSON text (a failure prints the text it must hold).

use a2acp_core::crypto::{Direction, IdentityKey, ThreadSession};
use a2acp_core::link::{
    challenge_signed_bytes, ClientFrame, RelayFrame, AUTH_LABEL, REGISTER_LABEL,
};
use a2acp_core::Address;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

const NOTES: &str = include_str!("../../docs/protocol.md");

/// The challenge of the relay link §3.1.
const NONCE_B64: &str = "drjgraDxPZBAXWrlU4a9KL3SGbigje0aqDbvzIt3Dcc";
const DOMAIN: &str = "a2acp.io";
const TS: u64 = 1_774_103_401_234;

/// The 32 bytes `x, x+1, …, x+31` (the envelope worked example's notation `seq(x)`).
fn seq(x: u8) -> [u8; 32] {
    std::array::from_fn(|i| x.wrapping_add(i as u8))
}

fn nonce() -> [u8; 32] {
    let v = URL_SAFE_NO_PAD.decode(NONCE_B64).expect("nonce decodes");
    v.try_into().expect("32 bytes")
}

fn addr(s: &str) -> Address {
    Address::parse(s).expect("valid address")
}

fn assert_documented(what: &str, frame: &[u8]) {
    let text = String::from_utf8(frame.to_vec()).expect("UTF-8");
    assert!(
        NOTES.contains(&text),
        "docs/protocol.md's {what} example is stale; it must read:\n{text}"
    );
}

#[test]
fn challenge_example() {
    let f = RelayFrame::Challenge {
        nonce: nonce(),
        domain: DOMAIN.into(),
        ts: 1_774_103_400_000,
    };
    assert_documented("challenge (§3.1)", &f.to_bytes());
}

#[test]
fn register_example_is_alice_with_seed_seq_0() {
    // Alice of the envelope worked example (identity seed seq(0x00)) registers.
    let alice = IdentityKey::from_seed(seq(0x00));
    let a = addr("agent:alice@a2acp.io");
    let key = alice.public().to_bytes();
    let signed = challenge_signed_bytes(REGISTER_LABEL, &nonce(), DOMAIN, TS, &a, Some(&key));
    let f = ClientFrame::Register {
        address: a,
        key,
        ts: TS,
        sig: alice.sign(&signed),
    };
    assert_documented("register (§3.3)", &f.to_bytes());
}

#[test]
fn auth_example_is_the_test_vector_of_3_5() {
    // Identity seed 02 × 32 and the nonce of §3.5.
    let bob = IdentityKey::from_seed([2; 32]);
    let b = addr("agent:bob@a2acp.io");
    let nonce = from_hex("9f07e7be5551387a98ba977c732d080dcb0f29a048e3656912c6533e32ee7aed");
    let nonce: [u8; 32] = nonce.try_into().expect("32 bytes");
    let signed = challenge_signed_bytes(AUTH_LABEL, &nonce, DOMAIN, TS, &b, None);
    let sig = bob.sign(&signed);
    let documented = |hex: &str| {
        // §3.5 prints the bytes in groups separated by spaces and line breaks.
        let squeezed: String = NOTES.split_whitespace().collect();
        assert!(squeezed.contains(hex), "§3.5 must show {hex}");
    };
    documented(&to_hex(&signed));
    documented(&to_hex(&sig));
    assert_eq!(
        to_hex(&bob.public().to_bytes()),
        "8139770ea87d175f56a35466c34c7ecccb8d8a91b4ee37a25df60f5b8fc9b394"
    );
    let f = ClientFrame::Auth {
        address: b,
        ts: TS,
        sig,
    };
    assert_documented("auth (§3.3)", &f.to_bytes());
}

fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn from_hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn send_example_is_m1_of_the_envelope_worked_example() {
    let alice = IdentityKey::from_seed(seq(0x00));
    let bob = IdentityKey::from_seed(seq(0x20));
    let (a, b) = (addr("agent:alice@a2acp.io"), addr("agent:bob@a2acp.io"));
    let mut session = ThreadSession::new(seq(0x40));
    let env = session
        .seal(
            &alice,
            &a,
            &b,
            &bob.public(),
            "thr_example",
            Direction::FromInitiator,
            br#"{"t":"hello"}"#,
        )
        .expect("seals");
    // It opens at Bob: the example is a real envelope, not an illustration.
    let mut at_bob = ThreadSession::new(seq(0x60));
    let opened = at_bob
        .open(&bob, &b, &env, &alice.public(), Direction::FromInitiator)
        .expect("opens");
    assert_eq!(opened.packet, br#"{"t":"hello"}"#.to_vec());
    let f = ClientFrame::Send { seq: 1, env };
    assert_documented("send (§4.1)", &f.to_bytes());
}

#[test]
fn the_envelope_worked_example_is_both_envelopes() {
    // The inputs of "Worked example": identity seeds seq(0x00) and seq(0x20), ephemeral
    // secrets seq(0x40) and seq(0x60); Bob's counter-0 envelope carries an empty packet.
    let alice = IdentityKey::from_seed(seq(0x00));
    let bob = IdentityKey::from_seed(seq(0x20));
    let (a, b) = (addr("agent:alice@a2acp.io"), addr("agent:bob@a2acp.io"));
    let (mut at_alice, mut at_bob) = (ThreadSession::new(seq(0x40)), ThreadSession::new(seq(0x60)));
    let tid = "thr_example";
    let m1 = at_alice
        .seal(
            &alice,
            &a,
            &b,
            &bob.public(),
            tid,
            Direction::FromInitiator,
            br#"{"t":"hello"}"#,
        )
        .expect("seals m1");
    at_bob
        .open(&bob, &b, &m1, &alice.public(), Direction::FromInitiator)
        .expect("m1 opens");
    at_bob
        .seal(
            &bob,
            &b,
            &a,
            &alice.public(),
            tid,
            Direction::FromResponder,
            b"",
        )
        .expect("seals Bob's counter 0");
    let m2 = at_bob
        .seal(
            &bob,
            &b,
            &a,
            &alice.public(),
            tid,
            Direction::FromResponder,
            br#"{"t":"ack"}"#,
        )
        .expect("seals m2");
    let opened = at_alice
        .open(&alice, &a, &m2, &bob.public(), Direction::FromResponder)
        .expect("m2 opens");
    assert_eq!(opened.packet, br#"{"t":"ack"}"#.to_vec());
    assert_documented("envelope m1", &m1.to_json());
    assert_documented("envelope m2", &m2.to_json());
    let documented = |what: &str, hex: String| {
        assert!(
            NOTES.contains(&format!("`{hex}`")),
            "the {what} must read `{hex}`"
        );
    };
    documented("Alice Ed25519 pk", to_hex(&alice.public().to_bytes()));
    documented(
        "Alice static X25519 pk",
        to_hex(&alice.public().to_x25519()),
    );
    documented("Bob Ed25519 pk", to_hex(&bob.public().to_bytes()));
    documented("Bob static X25519 pk", to_hex(&bob.public().to_x25519()));
    documented("Alice eph pk", to_hex(&at_alice.my_eph_public()));
    documented("Bob eph pk", to_hex(&at_bob.my_eph_public()));
}
