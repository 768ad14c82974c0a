"""The ACP client (client.py) against the worked example of docs/protocol.md "ACP (seed
004)" §6: it makes the same signature with agent-alpha's key, and opens the same body
encrypted to agent-beta. Exits non-zero on any difference."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client  # noqa: E402
import nacl.signing  # noqa: E402


def seq(x):
    return bytes((x + i) & 0xFF for i in range(32))


SENT = ('{"jsonrpc":"2.0","method":"agent.request","params":{"headers":{"agent-id":"agent-alpha",'
        '"principal-id":"principal-a","timestamp":"2026-02-14T14:30:00Z","message-type":"request",'
        '"trust-layer-version":"1.0.0","skill-layers-loaded":[0,1,2,3]},"body":{"action":'
        '"get-availability","parameters":{"date_range":"2026-02-17/2026-02-21","duration_minutes":60}},'
        '"signature":"RlLy8ytfXCpVkdCjuw_sKYTr6RSUIO0mHtMN_11cTF5qC6ERsobW4rU9GsjcsidxqDiheMtg5GHjX3AXXtuRAg"},'
        '"id":"req-7f3a-4b2c-9d1e"}')
ENCRYPTED = {"encrypted": {
    "alg": "X25519-XChaCha20-Poly1305",
    "eph": "eaYx7t4b-cmPEgMs3q3Q56B5OY_HhriMyEbsia-FpRo",
    "ct": "rnIsH3kaTwEuxg1CYPUI0VQeviTQOAiWfK90cyR6oSpzFjuaC_0NN1cSl33bhxGoT0GfA4uHjMF5hzHVDEPS41Z2ytnPf"
          "PcBJCLh4acL_brTlvqK00bv92uLws0YLlbK58x_4t5HzEkQQqdKKSgtVLKTH_ZIINE"}}

m = json.loads(SENT)
alpha = nacl.signing.SigningKey(seq(0x00))
assert client.b64(alpha.sign(client.signed_bytes(m)).signature) == m["params"]["signature"]
alpha.verify_key.verify(client.signed_bytes(m), client.unb64(m["params"]["signature"]))

beta = client.Agent.__new__(client.Agent)
beta.sk = nacl.signing.SigningKey(seq(0x20))
beta.me = "agent-beta"
e = json.loads(SENT)
e["params"]["body"] = ENCRYPTED
assert beta.open_body(e, "agent-alpha") == m["params"]["body"]
print("ok")
