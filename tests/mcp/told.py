"""What an MCP host is told is true, checked with the official MCP Python SDK (`mcp` on
PyPI) against a running agent's bridge (`a2acp mcp`, spec §17):

    python told.py errors SERVER_JSON
        Tool calls with wrong arguments: each error names the argument and what it must be.
    python told.py subscribe SERVER_JSON ADDRESS TRIES
        TRIES fresh sessions, each subscribing to the list of threads and at once starting
        a thread to ADDRESS: every session hears `a2acp://threads` updated.
    python told.py close SERVER_JSON
        A session over streamable HTTP opened and closed: the SDK's client ends it with a
        DELETE and logs no "Session termination failed".
    python told.py thread SERVER_JSON THREAD_ID
        The `thread` tool's answer for THREAD_ID.
    python told.py orient SERVER_JSON PROJECT
        The agent's Agentic Protocol memory through the tools: `projects`, `orient` on the
        relationship PROJECT, `pull` (latest and relevant), a `deposit`, `flag_for_review`,
        the person's `review` (asked through the host), `assert_fact` and `facts`.

SERVER_JSON as for negotiate.py. Prints one JSON report on stdout; exits non-zero with
the reason when an expectation fails.
"""

import json
import logging
import sys

import anyio

from negotiate import Failed, Person, expect, host


async def errors(server):
    """Each call is wrong in one argument; the words the host gets back."""
    calls = [
        ("start_thread", {"to": 5, "category": "scheduling", "summary": "dinner"}),
        ("start_thread", {"to": ["agent:bob@example.org", 7], "category": "s", "summary": "d"}),
        ("start_thread", {"to": "agent:bob@example.org", "summary": "dinner"}),
        ("start_thread", {"to": "agent:bob@example.org", "category": "s", "summary": "d", "urgent": "yes"}),
        ("answer", {"prompt_id": "one"}),
        ("set_permission", {"field": "dietary", "tier": "sometimes"}),
        ("thread", {"id": 12}),
        ("thread", {"id": "thr_x", "verbose": True}),
        ("reply_thread", {"id": "thr_x", "context": "at eight"}),
        ("read_notifications", {"number": -3}),
    ]
    out = []
    async with host(server, None) as h:
        for name, args in calls:
            r = await h.session.call_tool(name, args)
            text = " ".join(c.text for c in r.content if getattr(c, "type", "") == "text")
            expect(r.is_error, f"{name}({args}) was not refused: {text}")
            out.append(text)
    return {"errors": out}


async def subscribe(server, address, tries):
    heard = 0
    for i in range(tries):
        async with host(server, None) as h:
            await h.session.subscribe_resource("a2acp://threads")
            # At once: the change falls in the first moment of the subscription.
            await h.session.call_tool(
                "start_thread",
                {"to": address, "category": "scheduling", "summary": f"try {i}"},
            )
            with anyio.move_on_after(5):
                while "a2acp://threads" not in h.updated:
                    h.signal = anyio.Event()
                    await h.signal.wait()
            if "a2acp://threads" in h.updated:
                heard += 1
    return {"tries": tries, "heard": heard}


class Records(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(f"{record.name}: {record.getMessage()}")


async def close(server):
    records = Records()
    root = logging.getLogger()
    root.addHandler(records)
    root.setLevel(logging.DEBUG)
    async with host(server, None) as h:
        await h.session.send_ping()
    root.removeHandler(records)
    deletes = [l for l in records.lines if "DELETE" in l]
    failed = [l for l in records.lines if "termination failed" in l.lower()]
    return {"deletes": deletes, "failed": failed}


async def thread(server, thread_id):
    async with host(server, None) as h:
        return {"thread": await h.tool("thread", {"id": thread_id})}


async def orient(server, project):
    person = Person("alice")
    async with host(server, person) as h:
        projects = await h.tool("projects")
        oriented = await h.tool("orient", {"project": project})
        latest = await h.tool("pull", {"project": project, "limit": 20})
        relevant = await h.tool("pull", {"project": project, "mode": "relevant", "query": "dinner"})
        package = {
            "package_id": "pkg_mcp_note_1",
            "project_id": project,
            "relay_version": "0.1",
            "title": "Notes before the next dinner",
            "status": "draft",
            "package_type": "standard",
            "review_type": "none",
            "created_at": "2026-11-28T10:00:00Z",
            "created_by": {"id": "mcp-host", "type": "agent"},
            "open_questions": ["Same place next time?"],
        }
        deposited = await h.tool("deposit", {"project": project, "package": package})
        flagged = await h.tool(
            "flag_for_review", {"package_id": "pkg_mcp_note_1", "review_type": "human"}
        )
        reviewed = await h.tool(
            "review", {"package_id": "pkg_mcp_note_1", "status": "complete", "note": "fine"}
        )
        again = await h.tool(
            "review", {"package_id": "pkg_mcp_note_1", "status": "revision_requested"}, error=True
        )
        fact = await h.tool(
            "assert_fact",
            {"project": project, "fact": {"subject": "dinner", "predicate": "place", "value": "Reading"}},
        )
        facts = await h.tool("facts", {"project": project})
        return {
            "projects": projects,
            "orient": oriented,
            "latest": latest,
            "relevant": relevant,
            "deposited": deposited,
            "flagged": flagged,
            "reviewed": reviewed,
            "illegal": again,
            "fact": fact,
            "facts": facts,
            "asked": person.asked,
        }


async def main(argv):
    mode, server = argv[0], json.loads(argv[1])
    if mode == "errors":
        report = await errors(server)
    elif mode == "subscribe":
        report = await subscribe(server, argv[2], int(argv[3]))
    elif mode == "close":
        report = await close(server)
    elif mode == "thread":
        report = await thread(server, argv[2])
    elif mode == "orient":
        report = await orient(server, argv[2])
    else:
        raise Failed(f"unknown mode {mode}")
    print(json.dumps(report))


if __name__ == "__main__":
    try:
        anyio.run(main, sys.argv[1:])
    except Failed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
