"""An Agentic Protocol client written from seed 002 alone (v0.1 draft: §5.3 lifecycle,
§6 packages, §6.6 content hashing, §7 facts, §8 operations, §9.1 HTTP mapping,
Appendix A canonical JSON), driving a conformant L3 service:

    python client.py BASE_URL PROJECT_ID

conformance → deposit, awaiting a human review (its hash computed here and compared) →
idempotent re-deposit → 409 for another package under the same id → orient shows it →
a review that asks for a revision → flag_for_review → completed → nothing leaves
`complete` → facts
asserted, superseded and queried at a point in time → pull relevant.

Canonical JSON (Appendix A): object members without nulls, keys sorted, no whitespace,
numbers and strings per RFC 8785 (the `rfc8785` package). Only the standard library
otherwise. Prints one JSON report; exits 1 with the reason when the service does not do
what the seed says.
"""

import hashlib
import json
import sys
import urllib.error
import urllib.parse
import urllib.request

import rfc8785


class Failed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failed(what)


def without_nulls(v):
    if isinstance(v, dict):
        return {k: without_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [without_nulls(x) for x in v]
    return v


def content_hash(package):
    """§6.6: SHA-256 over the canonical JSON of the package (Appendix A)."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(without_nulls(package))).hexdigest()


class Service:
    def __init__(self, base):
        self.base = base.rstrip("/")

    def call(self, method, path, body=None, query=None):
        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None
        headers = {}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


def main(base, project):
    s = Service(base)
    q = urllib.parse.quote(project, safe="")
    report = {}

    status, d = s.call("GET", "/v1/conformance")
    expect(status == 200, f"conformance: {status}")
    report["level"] = d.get("conformance_level")
    expect(report["level"] == "L3", f"declares {d}")

    package = {
        "package_id": "pkg_c1e47c0ffee000000000000000000001",
        "project_id": project,
        "relay_version": "0.1",
        "title": "Drafted the venue shortlist",
        "status": "awaiting_review",
        "package_type": "standard",
        "review_type": "human",
        "created_at": "2026-11-20T18:00:00Z",
        "created_by": {"id": "seed-client", "type": "script", "session_id": None},
        "tags": ["venues", "dinner"],
        "decisions_made": ["Three places within 20 minutes of Reading"],
        "open_questions": ["Does Bob eat fish?"],
        "handoff_note": "Ask Bob before booking.",
        "significance": 6,
        "x-client": {"written_from": "seed 002"},
    }
    mine = content_hash(package)
    status, d = s.call("POST", f"/v1/projects/{q}/packages", package)
    expect(status == 201, f"deposit: {status} {d}")
    expect(d["content_hash"] == mine, f"hash {d['content_hash']} != {mine} (computed here)")
    expect(d["package"].get("x-client") == {"written_from": "seed 002"}, "x- field lost")
    report["hash"] = mine

    status, d = s.call("POST", f"/v1/projects/{q}/packages", package)
    expect(status in (200, 201) and d["content_hash"] == mine, f"identical re-deposit: {status} {d}")
    other = dict(package, title="Something else")
    status, d = s.call("POST", f"/v1/projects/{q}/packages", other)
    expect(status == 409 and d.get("error") == "duplicate_package_id", f"409: {status} {d}")
    report["duplicate"] = d["error"]

    status, d = s.call("GET", f"/v1/projects/{q}/orient", query={"window_days": 3650})
    expect(status == 200, f"orient: {status} {d}")
    expect(package["package_id"] in json.dumps(d) or "Does Bob eat fish?" in json.dumps(d),
           f"orient does not show the package: {d}")

    pid = package["package_id"]
    status, d = s.call("POST", f"/v1/packages/{pid}/review", {"status": "revision_requested", "note": "add a fourth"})
    expect(status == 200 and d["package"]["status"] == "revision_requested", f"revise: {status} {d}")
    status, d = s.call("POST", f"/v1/packages/{pid}/flag", {"review_type": "human", "note": "four now"})
    expect(status == 200 and d["package"]["status"] == "awaiting_review", f"flag: {status} {d}")
    expect(d["package"]["review_type"] == "human", f"flag review_type: {d}")
    status, d = s.call("POST", f"/v1/packages/{pid}/review", {"status": "complete"})
    expect(status == 200 and d["package"]["status"] == "complete", f"complete: {status} {d}")
    expect(d["content_hash"] == content_hash(d["package"]), "the reviewed package's hash")
    status, d = s.call("POST", f"/v1/packages/{pid}/flag", {"review_type": "agent"})
    expect(status == 400 and d.get("error") == "invalid_transition", f"flag after complete: {status} {d}")
    report["after_complete"] = d["error"]
    status, d = s.call("GET", f"/v1/packages/{pid}")
    expect(status == 200 and d["package"]["status"] == "complete", f"pull specific: {status} {d}")

    fact = {"subject": "bob", "predicate": "eats_fish", "value": "unknown", "valid_from": "2026-11-01T00:00:00Z"}
    status, d = s.call("POST", f"/v1/projects/{q}/facts", fact)
    expect(status in (200, 201), f"assert: {status} {d}")
    fact2 = dict(fact, value="yes", valid_from="2026-11-21T00:00:00Z", source_package_id=pid)
    status, d = s.call("POST", f"/v1/projects/{q}/facts", fact2)
    expect(status in (200, 201), f"assert 2: {status} {d}")
    status, d = s.call("GET", f"/v1/projects/{q}/facts", query={"subject": "bob", "predicate": "eats_fish"})
    now = [f["value"] for f in d["facts"]]
    expect(now == ["yes"], f"current facts: {d}")
    status, d = s.call("GET", f"/v1/projects/{q}/facts",
                       query={"subject": "bob", "predicate": "eats_fish", "at": "2026-11-10T00:00:00Z"})
    then = [f["value"] for f in d["facts"]]
    expect(then == ["unknown"], f"facts at a point in time: {d}")
    report["facts"] = {"now": now, "then": then}
    status, d = s.call("DELETE", f"/v1/projects/{q}/facts", query={"subject": "bob", "predicate": "eats_fish"})
    expect(status == 200, f"invalidate: {status} {d}")

    status, d = s.call("GET", f"/v1/projects/{q}/packages", query={"mode": "relevant", "query": "venue shortlist"})
    expect(status == 200, f"relevant: {status} {d}")
    expect(any(p["package_id"] == pid for p in d["packages"]), f"relevant: {d}")
    report["relevant"] = len(d["packages"])
    print(json.dumps(report))


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2])
    except Failed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
