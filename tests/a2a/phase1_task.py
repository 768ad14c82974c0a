"""A sender that knows only seed 001 (A2A Phase 1): assigns a scheduling task to an agent
and waits for its task_completion. Standard library only; every message is built by
hand from the seed's text, not by a2acp's code.

Usage: phase1_task.py AGENT_URL AGENT_ID push|poll [DATE]

- push: the assignment's metadata names this sender's own endpoint (`reply_to`), where it
  serves `POST /a2a/messages` (the seed's transport) and acknowledges what comes: the
  agent's status_updates (fire-and-forget) and its task_completion (acknowledged within
  the seed's 10 s). The sender asks nothing meanwhile.
- poll: no endpoint; the sender asks where its task stands with a status_update about it
  every half second, and reads the agent's answer (a status_update, then the
  task_completion).

Every message received is checked against the seed (envelope fields, UUID v4 ids,
ISO 8601 timestamp, the payload's fields and no others). Prints one JSON line with what
it saw; exits non-zero on any surprise or after 120 s without a completion.
"""

import json
import re
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", re.I)
STATUSES = {"created", "assigned", "in_progress", "completed", "failed", "cancelled"}
PAYLOAD_FIELDS = {
    "status_update": ({"task_id", "status"}, {"progress", "message", "metadata"}),
    "task_completion": ({"task_id", "status", "result"}, {"execution_time_ms", "metadata"}),
    "error": ({"error_code", "error_message"}, {"original_message_id", "details"}),
    "ping": ({"nonce"}, {"echo"}),
}

ME = str(uuid.uuid4())


def now():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def envelope(to, kind, payload):
    return {
        "version": "1.0.0",
        "message_id": str(uuid.uuid4()),
        "timestamp": now(),
        "from": ME,
        "to": to,
        "type": kind,
        "payload": payload,
    }


def check(m, agent):
    """The seed's envelope and payload rules, for a message the agent sent us."""
    assert isinstance(m, dict), m
    assert set(m) - {"signature"} == {"version", "message_id", "timestamp", "from", "to", "type", "payload"}, m
    assert m["version"] == "1.0.0", m
    assert UUID4.match(m["message_id"]), m
    datetime.fromisoformat(m["timestamp"].replace("Z", "+00:00"))
    assert m["from"] == agent and m["to"] == ME, m
    required, optional = PAYLOAD_FIELDS[m["type"]]
    p = m["payload"]
    assert required <= set(p) <= required | optional, m
    if m["type"] == "status_update":
        assert p["status"] in STATUSES, m
        if "progress" in p:
            assert 0.0 <= p["progress"] <= 1.0, m
    if m["type"] == "task_completion":
        assert p["status"] in ("completed", "failed"), m
        assert isinstance(p["result"], dict), m
    return m


def post(url, message):
    """POST /a2a/messages: the HTTP status and the answer (JSON)."""
    req = urllib.request.Request(
        url.rstrip("/") + "/a2a/messages",
        data=json.dumps(message).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def main():
    url, agent, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    date = sys.argv[4] if len(sys.argv) > 4 else "2026-03-27"
    report = {"mode": mode, "pushed": [], "polled": []}
    done = threading.Event()
    final = {}

    class Inbox(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                m = check(json.loads(body), agent)
            except Exception as e:  # a message the seed does not allow
                report.setdefault("bad", []).append(f"{type(e).__name__}: {e}: {body[:300]!r}")
                self.send_response(400)
                self.end_headers()
                return
            p = m["payload"]
            report["pushed"].append([m["type"], p.get("status")])
            # Acknowledged with a message back to the agent about the same task.
            ack = envelope(agent, "status_update", {"task_id": p["task_id"], "status": p["status"]})
            out = json.dumps(ack).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            if m["type"] == "task_completion":
                final.update(m)
                done.set()

    inbox = ThreadingHTTPServer(("127.0.0.1", 0), Inbox)
    threading.Thread(target=inbox.serve_forever, daemon=True).start()
    mine = f"http://127.0.0.1:{inbox.server_address[1]}"

    # ping: the agent echoes the nonce.
    status, r = post(url, envelope(agent, "ping", {"nonce": "n-1", "echo": {"x": 1}}))
    assert status == 200 and check(r, agent)["type"] == "ping", (status, r)
    assert r["payload"] == {"nonce": "n-1", "echo": {"x": 1}}, r

    # assign: the task's parameters go up front; nothing more can be asked of us.
    task_id = f"task-{uuid.uuid4()}"
    assignment = {
        "task_id": task_id,
        "task_type": "scheduling",
        "title": "Dinner on Friday",
        "description": "Find a time and a place for dinner with the agent's user",
        "payload": {
            "proposed_date": date,
            "time_windows": ["18:00-21:00"],
            "timezone": "Europe/London",
            "location_preference": "central Reading",
            "dietary": ["vegetarian"],
            "party_size": 2,
        },
        "priority": "high",
        "metadata": {"source": "seed-001-sender"},
    }
    if mode == "push":
        assignment["metadata"]["reply_to"] = mine
    status, r = post(url, envelope(agent, "task_assignment", assignment))
    assert status == 200, (status, r)
    check(r, agent)
    report["ack"] = [r["type"], r["payload"]["status"]]

    deadline = time.monotonic() + 120
    if mode == "push":
        done.wait(max(0, deadline - time.monotonic()))
    else:
        while time.monotonic() < deadline:
            status, r = post(url, envelope(agent, "status_update", {"task_id": task_id, "status": "in_progress"}))
            assert status == 200, (status, r)
            check(r, agent)
            report["polled"].append([r["type"], r["payload"]["status"]])
            if r["type"] == "task_completion":
                final.update(r)
                break
            time.sleep(0.5)
    assert final, f"no task_completion within 120 s: {report}"
    report["completion"] = final["payload"]
    report["text"] = json.dumps(final)
    # Asked again afterwards, the agent says the same.
    status, r = post(url, envelope(agent, "status_update", {"task_id": task_id, "status": "in_progress"}))
    assert status == 200 and check(r, agent)["type"] == "task_completion", (status, r)
    report["again"] = r["payload"]["status"]
    time.sleep(0.5)
    inbox.shutdown()
    print(json.dumps(report))


main()
