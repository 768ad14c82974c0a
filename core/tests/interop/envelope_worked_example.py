#!/usr/bin/env python3
"""Independent implementation of the a2acp end-to-end envelope (docs/protocol.md "The end-to-end
envelope (§16)"), written from the document alone on libsodium (through PyNaCl) and the
standard library. It rebuilds the worked example's two envelopes from its inputs and prints
them as JSON, then opens each the way a recipient does.

    python3 -m venv venv && venv/bin/pip install pynacl
    venv/bin/python core/tests/interop/envelope_worked_example.py

The output must equal, byte for byte, the two JSON lines of the worked example, which the
Rust unit test `crypto::session::kat::worked_example` pins.
"""

import base64
import hashlib
import hmac
import json
import struct

from nacl import bindings as sodium
from nacl.signing import SigningKey, VerifyKey

KDF_SALT = b"A2ACP-KDF-V1"
AD_LABEL = b"A2ACP-AD-V1\0"
ENVELOPE_LABEL = b"A2ACP-ENVELOPE-V1\0"
TAG_LABEL = b"A2ACP-THREAD-TAG-V1\0"
FROM_INITIATOR, FROM_RESPONDER = 0, 1


def seq(start):
    return bytes((start + i) & 0xFF for i in range(32))


def lp(b):
    return struct.pack(">I", len(b)) + b


def opt(p):
    return b"\0" if p is None else b"\1" + p


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def hkdf_sha256(ikm, info):
    prk = hmac.new(KDF_SALT, ikm, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\1", hashlib.sha256).digest()


def thread_tag(thread_id):
    return hashlib.sha256(TAG_LABEL + thread_id.encode()).digest()[:16]


def nonce(counter):
    return b"\0" * 16 + struct.pack(">Q", counter)


class Identity:
    def __init__(self, seed, address):
        self.sk = SigningKey(seed)
        self.pk = bytes(self.sk.verify_key)
        self.address = address.encode()
        # The static X25519 pair: the birational map of the Ed25519 key.
        self.x_pk = sodium.crypto_sign_ed25519_pk_to_curve25519(self.pk)
        self.x_sk = sodium.crypto_sign_ed25519_sk_to_curve25519(seed + self.pk)


def agree(secret, public):
    shared = sodium.crypto_scalarmult(secret, public)
    assert shared != b"\0" * 32, "non-contributory"
    return shared


def seal(sender, recipient, eph_sk, peer_eph, thread_id, direction, counter, packet):
    """`recipient` is the recipient's Identity (address, Ed25519 and X25519 keys)."""
    eph = sodium.crypto_scalarmult_base(eph_sk)
    tag = thread_tag(thread_id)
    mode = b"es" if peer_eph is None else b"ee"
    info = (mode + bytes([direction]) + lp(sender.address) + lp(recipient.address)
            + sender.pk + recipient.pk + tag + eph + (peer_eph or b""))
    ikm = agree(eph_sk, recipient.x_pk if peer_eph is None else peer_eph)
    key = hkdf_sha256(ikm, info)
    ad = (AD_LABEL + b"\1" + lp(sender.address) + lp(recipient.address) + sender.pk
          + recipient.pk + tag + bytes([direction]) + eph + opt(peer_eph))
    n = nonce(counter)
    plaintext = lp(thread_id.encode()) + packet
    ct = sodium.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, ad, n, key)
    signed = (ENVELOPE_LABEL + b"\1" + lp(sender.address) + lp(recipient.address) + sender.pk
              + tag + bytes([direction]) + eph + opt(peer_eph) + n + lp(ct))
    sig = sender.sk.sign(signed).signature
    env = {"v": 1, "from": sender.address.decode(), "to": recipient.address.decode(),
           "from_key": b64(sender.pk), "thread": b64(tag), "dir": direction, "eph": b64(eph)}
    if peer_eph is not None:
        env["peer_eph"] = b64(peer_eph)
    env.update({"nonce": b64(n), "ct": b64(ct), "sig": b64(sig)})
    return env


def open_envelope(me, my_eph_sk, sender, env, check_signature=True):
    """Opens `env` as `me`; returns (thread_id, packet)."""
    eph = unb64(env["eph"])
    peer_eph = unb64(env["peer_eph"]) if "peer_eph" in env else None
    tag, n, ct = unb64(env["thread"]), unb64(env["nonce"]), unb64(env["ct"])
    direction = env["dir"]
    src, dst = env["from"].encode(), env["to"].encode()
    assert dst == me.address and unb64(env["from_key"]) == sender.pk
    if check_signature:
        signed = (ENVELOPE_LABEL + b"\1" + lp(src) + lp(dst) + sender.pk + tag
                  + bytes([direction]) + eph + opt(peer_eph) + n + lp(ct))
        VerifyKey(sender.pk).verify(signed, unb64(env["sig"]))
    mode = b"es" if peer_eph is None else b"ee"
    info = (mode + bytes([direction]) + lp(src) + lp(dst) + sender.pk + me.pk + tag + eph
            + (peer_eph or b""))
    ikm = agree(me.x_sk if peer_eph is None else my_eph_sk, eph)
    key = hkdf_sha256(ikm, info)
    ad = (AD_LABEL + b"\1" + lp(src) + lp(dst) + sender.pk + me.pk + tag
          + bytes([direction]) + eph + opt(peer_eph))
    pt = sodium.crypto_aead_xchacha20poly1305_ietf_decrypt(ct, ad, n, key)
    (length,) = struct.unpack(">I", pt[:4])
    thread_id = pt[4:4 + length].decode()
    assert thread_tag(thread_id) == tag
    return thread_id, pt[4 + length:]


def main():
    alice = Identity(seq(0x00), "agent:alice@a2acp.io")
    bob = Identity(seq(0x20), "agent:bob@a2acp.io")
    alice_eph_sk, bob_eph_sk = seq(0x40), seq(0x60)
    alice_eph = sodium.crypto_scalarmult_base(alice_eph_sk)
    tid = "thr_example"
    # m1: Alice -> Bob, es, counter 0.
    m1 = seal(alice, bob, alice_eph_sk, None, tid, FROM_INITIATOR, 0, b'{"t":"hello"}')
    # m2: Bob -> Alice, ee, counter 1 (Bob's counter-0 envelope carried an empty packet).
    m2 = seal(bob, alice, bob_eph_sk, alice_eph, tid, FROM_RESPONDER, 1, b'{"t":"ack"}')
    for env in (m1, m2):
        print(json.dumps(env, separators=(",", ":")))
    assert open_envelope(bob, bob_eph_sk, alice, m1) == (tid, b'{"t":"hello"}')
    assert open_envelope(alice, alice_eph_sk, bob, m2) == (tid, b'{"t":"ack"}')


if __name__ == "__main__":
    main()
