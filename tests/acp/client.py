"""An ACP agent (seed 004) written from the seed and a2acp's SPEC-NOTES / docs/protocol.md
"ACP (seed 004)" alone: PyNaCl for Ed25519, X25519 and XChaCha20-Poly1305, `rfc8785` for the
canonical JSON, `nats-py` for the inbox, the standard library for HTTP. It talks to an a2acp
agent through the relay's gateway, and prints what happened as one JSON object on stdout.

    client.py initiate --gateway URL --nats URL --me beta --peer alice --home DIR
    client.py respond  --gateway URL --nats URL --me beta --peer alice --home DIR
    client.py hostile  --gateway URL --nats URL --me beta --peer alice --home DIR

`initiate`: the handshake, the seed's §8 request (get-availability), a notification and a
handoff to the a2acp agent. `respond`: waits for the a2acp agent's handshake and request and
answers as §8 does. `hostile`: messages every receiver must refuse. Every message sent and
received is written to DIR/audit.jsonl in the seed's §6 schema.
"""

import argparse
import asyncio
import base64
import datetime
import hashlib
import hmac
import json
import os
import sys
import urllib.error
import urllib.request
import uuid

import nacl.bindings as sodium
import nacl.signing
import nats
import rfc8785

SIG_LABEL = b"A2ACP-ACP-SIG-V1\x00"
REGISTER_LABEL = b"A2ACP-ACP-REGISTER-V1\x00"
BODY_LABEL = b"A2ACP-ACP-BODY-V1"
HEADERS = ["agent-id", "principal-id", "timestamp", "message-type",
           "trust-layer-version", "skill-layers-loaded"]


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def now_ts(shift=0):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=shift)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def container(m):
    if "params" in m:
        return m["params"]
    if "result" in m:
        return m["result"]
    return m["error"]["data"]


def signed_bytes(m):
    copy = json.loads(json.dumps(m))
    container(copy).pop("signature", None)
    return SIG_LABEL + rfc8785.dumps(copy)


class Agent:
    def __init__(self, args, me=None, principal=None):
        self.gateway = args.gateway.rstrip("/")
        self.nats_url = args.nats
        self.me = me or args.me
        self.principal = principal or ("principal-" + self.me)
        seed = hashlib.sha256(("acp test key " + self.me).encode()).digest()
        self.sk = nacl.signing.SigningKey(seed)
        self.home = args.home
        os.makedirs(self.home, exist_ok=True)
        self.keys = {}
        self.inbox = asyncio.Queue()
        self.nc = None

    # -- the seed's §6 audit log ---------------------------------------------------------
    def audit(self, direction, m, peer, peer_principal=""):
        h = container(m).get("headers", {}) if isinstance(container(m), dict) else {}
        me = {"agent": self.me, "principal": self.principal}
        them = {"agent": peer, "principal": peer_principal}
        entry = {
            "ts": now_ts(),
            "direction": direction,
            "from": me if direction == "sent" else them,
            "to": them if direction == "sent" else me,
            "type": h.get("message-type"),
            "method": m.get("method", "response"),
            "id": m.get("id"),
            "summary": "%s %s" % (direction, m.get("method", "response")),
            "channel": "nats:agent.%s.inbox" % (peer if direction == "sent" else self.me),
        }
        with open(os.path.join(self.home, "audit.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")

    # -- HTTP to the gateway ------------------------------------------------------------
    def http(self, method, path, body=None):
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.gateway + path, data=data, method=method,
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=15) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw.decode(errors="replace")

    def register(self):
        proof = self.sk.sign(REGISTER_LABEL + self.me.encode()).signature
        st, body = self.http("POST", "/acp/v1/agents", {
            "agent_id": self.me,
            "public_key": b64(bytes(self.sk.verify_key)),
            "proof": b64(proof),
        })
        assert st in (200, 201), (st, body)

    def key_of(self, agent_id):
        if agent_id not in self.keys:
            st, body = self.http("GET", "/acp/v1/agents/" + agent_id)
            assert st == 200, (st, body)
            self.keys[agent_id] = nacl.signing.VerifyKey(unb64(body["public_key"]))
        return self.keys[agent_id]

    # -- messages -----------------------------------------------------------------------
    def headers(self, message_type, ts=None):
        return {
            "agent-id": self.me,
            "principal-id": self.principal,
            "timestamp": ts or now_ts(),
            "message-type": message_type,
            "trust-layer-version": "1.0.0",
            "skill-layers-loaded": [0, 1, 2, 3],
        }

    def sign(self, m):
        container(m)["signature"] = b64(self.sk.sign(signed_bytes(m)).signature)
        return m

    def call(self, method, message_type, body, with_id=True, ts=None):
        m = {"jsonrpc": "2.0", "method": method,
             "params": {"headers": self.headers(message_type, ts), "body": body}}
        if with_id:
            m["id"] = str(uuid.uuid4())
        return self.sign(m)

    def result(self, request_id, body):
        return self.sign({"jsonrpc": "2.0", "id": request_id,
                          "result": {"headers": self.headers("response"), "body": body}})

    def post(self, to, m, peer_principal=""):
        raw = m if isinstance(m, bytes) else json.dumps(m).encode()
        st, body = self.http("POST", "/acp/v1/inbox/" + to, raw)
        if st == 202 and not isinstance(m, bytes):
            self.audit("sent", m, to, peer_principal)
        return st, body

    def verify(self, m):
        sender = container(m)["headers"]["agent-id"]
        sig = unb64(container(m)["signature"])
        self.key_of(sender).verify(signed_bytes(m), sig)
        return sender

    def open_body(self, m, sender):
        """The body of `m`, decrypted when it came encrypted to this agent (§3)."""
        body = container(m).get("body")
        if not isinstance(body, dict) or "encrypted" not in body:
            return body
        enc = body["encrypted"]
        eph, ct = unb64(enc["eph"]), unb64(enc["ct"])
        my_x_sk = sodium.crypto_sign_ed25519_sk_to_curve25519(
            bytes(self.sk) + bytes(self.sk.verify_key))
        my_x_pk = sodium.crypto_sign_ed25519_pk_to_curve25519(bytes(self.sk.verify_key))
        ikm = sodium.crypto_scalarmult(my_x_sk, eph)

        def lp(s):
            return len(s.encode()).to_bytes(4, "big") + s.encode()
        info = eph + my_x_pk + lp(sender) + lp(self.me)
        prk = hmac.new(BODY_LABEL, ikm, hashlib.sha256).digest()
        key = hmac.new(prk, info + b"\x01", hashlib.sha256).digest()
        ad = BODY_LABEL + b"\x00" + rfc8785.dumps(container(m)["headers"])
        plain = sodium.crypto_aead_xchacha20poly1305_ietf_decrypt(ct, ad, bytes(24), key)
        return json.loads(plain)

    # -- the inbox ----------------------------------------------------------------------
    async def connect(self):
        self.nc = await nats.connect(self.nats_url)

        async def on_message(msg):
            await self.inbox.put(json.loads(msg.data))
        await self.nc.subscribe("agent.%s.inbox" % self.me, cb=on_message)
        await self.nc.flush()

    async def next(self, timeout=45, want=None):
        """The next verified message (that `want` accepts), within `timeout` seconds."""
        deadline = asyncio.get_event_loop().time() + timeout
        while True:
            left = deadline - asyncio.get_event_loop().time()
            m = await asyncio.wait_for(self.inbox.get(), max(left, 0.01))
            sender = self.verify(m)
            self.audit("received", m, sender, container(m)["headers"].get("principal-id", ""))
            if want is None or want(m):
                return m


async def handshake_initiator(a, peer):
    st, body = a.post(peer, a.call("agent.announce", "notification",
                                   {"purpose": "scheduling", "capabilities": ["calendar"]},
                                   with_id=False))
    assert st == 202, (st, body)
    await a.next(want=lambda m: m.get("method") == "agent.announce")
    a.post(peer, a.call("agent.capabilities", "notification", {
        "tools": ["calendar"], "domains": ["scheduling"], "requesting": ["availability"],
        "limits": {"max_requests_per_minute": 10}}, with_id=False))
    await a.next(want=lambda m: m.get("method") == "agent.capabilities")


async def handshake_responder(a, peer):
    await a.next(want=lambda m: m.get("method") == "agent.announce")
    a.post(peer, a.call("agent.announce", "notification", {"purpose": "scheduling"},
                        with_id=False))
    await a.next(want=lambda m: m.get("method") == "agent.capabilities")
    a.post(peer, a.call("agent.capabilities", "notification", {
        "tools": ["calendar"], "domains": ["scheduling"], "requesting": [],
        "limits": {}}, with_id=False))


async def ask(a, peer, m, timeout=45, replay=False):
    """Posts request `m` and waits for its answer. A replay's error answers with the id
    `null` (docs/protocol.md §4: the original may still wait for its own answer)."""
    st, body = a.post(peer, m)
    assert st == 202, (st, body)
    ids = (m["id"], None) if replay else (m["id"],)
    r = await a.next(timeout, want=lambda x: x.get("id") in ids and "method" not in x)
    if "error" in r:
        return {"error": r["error"]}
    return {"result": a.open_body(r, peer)}


async def initiate(args):
    a = Agent(args)
    a.register()
    await a.connect()
    await handshake_initiator(a, args.peer)
    out = {"established": True}
    # Seed 004 §8.
    out["request"] = await ask(a, args.peer, a.call("agent.request", "request", {
        "action": "get-availability",
        "parameters": {"date_range": "2026-02-17/2026-02-21", "duration_minutes": 60}}))
    st, _ = a.post(args.peer, a.call("agent.notification", "notification",
                                     {"note": "sent my availability request"}, with_id=False))
    out["notification_status"] = st
    out["handoff"] = await ask(a, args.peer, a.call("agent.handoff", "handoff", {
        "action": "Book the team lunch",
        "completed": ["picked the restaurant"],
        "remaining": ["agree a time"],
        "context": {"location_preference": "the canteen", "party_size": 4}}))
    print(json.dumps(out))


async def respond(args):
    a = Agent(args)
    a.register()
    await a.connect()
    print(json.dumps({"ready": True}), flush=True)
    await handshake_responder(a, args.peer)
    seen = []
    end = asyncio.get_event_loop().time() + args.serve_for
    while asyncio.get_event_loop().time() < end:
        try:
            m = await a.next(timeout=end - asyncio.get_event_loop().time(),
                             want=lambda x: x.get("method") == "agent.request")
        except asyncio.TimeoutError:
            break
        body = a.open_body(m, args.peer)
        seen.append(body)
        answer = ({"available_slots": ["2026-02-18T10:00:00Z", "2026-02-19T14:00:00Z",
                                       "2026-02-20T09:00:00Z"]}
                  if len(seen) == 1 else {})
        a.post(args.peer, a.result(m["id"], answer))
        if len(seen) == 1 and args.serve_for > 0:
            print(json.dumps({"request": body}), flush=True)
    print(json.dumps({"requests": seen}), flush=True)


async def hostile(args):
    a = Agent(args)
    a.register()
    await a.connect()
    peer = args.peer
    out = {}
    # A substantive message before any handshake: accepted by the gateway (signed, from a
    # registered agent), refused by the agent (-32005), with an error to this inbox.
    early = a.call("agent.request", "request", {"action": "get-availability"})
    st, _ = a.post(peer, early)
    r = await a.next(20, want=lambda m: m.get("id") == early["id"])
    out["early"] = {"status": st, "code": r.get("error", {}).get("code")}
    # Each header missing, then malformed: refused by the gateway, naming the header.
    malformed = {"agent-id": "Not Valid", "principal-id": "", "timestamp": "yesterday",
                 "message-type": "gossip", "trust-layer-version": "2.0",
                 "skill-layers-loaded": [99]}
    out["missing"], out["malformed"] = {}, {}
    for h in HEADERS:
        m = a.call("agent.request", "request", {"action": "x"})
        del container(m)["headers"][h]
        a.sign(m)
        out["missing"][h] = a.post(peer, m)
        m = a.call("agent.request", "request", {"action": "x"})
        container(m)["headers"][h] = malformed[h]
        a.sign(m)
        out["malformed"][h] = a.post(peer, m)
    # A bad signature.
    m = a.call("agent.request", "request", {"action": "x"})
    container(m)["body"]["action"] = "y"
    out["bad_signature"] = a.post(peer, m)
    # Too large.
    m = a.call("agent.request", "request", {"action": "x" * (300 * 1024)})
    out["too_large"] = a.post(peer, m)[0]
    # Not JSON.
    out["not_json"] = a.post(peer, b"{not json")
    # The handshake, then replays: the same id again with a new signature and timestamp
    # (-32006), a timestamp 10 minutes old (-32006).
    await handshake_initiator(a, peer)
    first = a.call("agent.request", "request", {"action": "get-availability"})
    out["first"] = await ask(a, peer, first)
    again = json.loads(json.dumps(first))
    container(again)["headers"]["timestamp"] = now_ts(1)
    a.sign(again)
    out["replay"] = await ask(a, peer, again, timeout=20, replay=True)
    stale = a.call("agent.request", "request", {"action": "x"}, ts=now_ts(-600))
    out["stale"] = await ask(a, peer, stale, timeout=20, replay=True)
    # A flood: many notifications at once; the gateway answers each with 202 or 429.
    statuses = []
    for i in range(args.flood):
        statuses.append(a.post(peer, a.call("agent.notification", "notification",
                                            {"n": i}, with_id=False))[0])
    out["flood"] = statuses
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["initiate", "respond", "hostile"])
    p.add_argument("--gateway", required=True)
    p.add_argument("--nats", required=True)
    p.add_argument("--me", required=True)
    p.add_argument("--peer", required=True)
    p.add_argument("--home", required=True)
    p.add_argument("--serve-for", type=float, default=30)
    p.add_argument("--flood", type=int, default=40)
    args = p.parse_args()
    run = {"initiate": initiate, "respond": respond, "hostile": hostile}[args.scenario]
    asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
