"""The official MCP Python SDK (`mcp` on PyPI) drives a whole negotiation between two
running a2acp agents through their MCP bridges (`a2acp mcp`, spec §17), as an MCP host
would: Alice's host starts the dinner, each host answers the agent's prompts by asking its
person (MCP elicitation), and both threads end COMPLETED.

    python negotiate.py SERVER_ALICE_JSON SERVER_BOB_JSON BOB_ADDRESS [DATE]

SERVER_*_JSON: how to reach a bridge. A JSON list is the command that starts it on stdio
(`["a2acp", "--home", "…", "mcp"]`); a JSON object `{"url": "http://…/mcp", "token": …}`
is a bridge serving streamable HTTP (`a2acp mcp --listen`), the token (or null) sent as a
bearer token. Prints one JSON report on stdout; exits non-zero with the reason when an
expectation fails.
"""

import json
import sys
from contextlib import asynccontextmanager

import anyio
import httpx2
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

# The protocol version the bridge is tested at (SPEC-NOTES "The MCP bridge (§17)").
PINNED = "2025-11-25"
EXPECTED_TOOLS = {
    "status", "start_thread", "threads", "thread", "prompts", "answer", "reply_thread",
    "cancel_thread", "permissions", "set_permission", "memory", "notifications",
    "read_notifications", "suggestions", "accept_suggestion", "block", "unblock",
}


class Failed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failed(what)


class Person:
    """A scripted person behind a host: shares what is asked, confirms proposals, and
    refuses to loosen a permission."""

    def __init__(self, name):
        self.name = name
        self.asked = []

    async def elicit(self, context, params):
        message = params.message
        self.asked.append(message)
        # A person takes a moment to answer (longer than the bridge's watch interval, so
        # a subscribed host hears of the prompt while it is open).
        await anyio.sleep(1.2)
        if message.startswith("Set "):
            return types.ElicitResult(action="decline")
        if "share-all" in message:
            return types.ElicitResult(action="accept", content={"answer": "share-all"})
        if "confirm |" in message:
            return types.ElicitResult(action="accept", content={"answer": "confirm"})
        return types.ElicitResult(action="accept", content={"confirm": True})


class Host:
    """One MCP client session with a bridge, and the notifications it received."""

    def __init__(self, session, person):
        self.session = session
        self.person = person
        self.updated = []
        self.list_changed = 0
        self.signal = anyio.Event()

    async def on_message(self, message):
        root = getattr(message, "root", message)
        if isinstance(root, types.ResourceUpdatedNotification):
            self.updated.append(str(root.params.uri))
            self.signal.set()
        elif isinstance(root, types.ResourceListChangedNotification):
            self.list_changed += 1
            self.signal.set()

    async def tool(self, name, args=None, error=False):
        r = await self.session.call_tool(name, args or {})
        text = " ".join(c.text for c in r.content if getattr(c, "type", "") == "text")
        expect(bool(r.is_error) == error, f"{name}({args}) is_error={r.is_error}: {text}")
        if r.structured_content is not None:
            return r.structured_content.get("result")
        return text


@asynccontextmanager
async def transport(server):
    """The streams to one bridge: a process on stdio, or an HTTP endpoint."""
    if isinstance(server, dict):
        token = server.get("token")
        headers = {"Authorization": f"Bearer {token}"} if token else None
        timeout = httpx2.Timeout(30, read=300)
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as client:
            async with streamable_http_client(server["url"], http_client=client) as (read, write):
                yield read, write
    else:
        params = StdioServerParameters(command=server[0], args=server[1:])
        async with stdio_client(params) as (read, write):
            yield read, write


@asynccontextmanager
async def host(command, person):
    async with transport(command) as (read, write):
        holder = {}

        async def on_message(m):
            if "host" in holder:
                await holder["host"].on_message(m)

        callback = person.elicit if person is not None else None
        async with ClientSession(
            read, write, elicitation_callback=callback, message_handler=on_message
        ) as session:
            init = await session.initialize()
            expect(init.protocol_version == PINNED, f"negotiated {init.protocol_version}")
            expect(init.server_info.name == "a2acp", f"server {init.server_info}")
            h = Host(session, person)
            holder["host"] = h
            yield h


async def state(h, thread_id):
    for t in await h.tool("threads"):
        if t["id"] == thread_id:
            return t["state"]
    return None


async def main(alice_cmd, bob_cmd, bob_address):
    report = {"protocol": PINNED}
    alice_person, bob_person = Person("alice"), Person("bob")
    async with host(alice_cmd, alice_person) as alice, host(bob_cmd, bob_person) as bob, host(
        alice_cmd, None
    ) as plain:
        tools = {t.name for t in (await alice.session.list_tools()).tools}
        expect(EXPECTED_TOOLS <= tools, f"tools missing: {EXPECTED_TOOLS - tools}")
        report["tools"] = len(tools)
        for h in (alice, bob):
            await h.session.subscribe_resource("a2acp://prompts")
            await h.session.subscribe_resource("a2acp://threads")

        # Bad input is an error the host sees, never a crash of the bridge.
        await alice.tool("start_thread", {"to": bob_address}, error=True)
        await alice.tool("thread", {"id": "thr_nosuchthread"}, error=True)

        started = await alice.tool(
            "start_thread",
            {
                "to": bob_address,
                "category": "scheduling",
                "summary": "Coordinate dinner on Friday",
                "context": {
                    "event_type": "dinner",
                    "proposed_date": sys.argv[4] if len(sys.argv) > 4 else "2026-12-04",
                    "time_windows": ["18:00-21:00"],
                    "location_preference": "central Reading",
                    "party_size": 2,
                    "dietary": ["vegetarian"],
                    "budget_range": "£20-40pp",
                    "flexibility": {"date": "somewhat_flexible", "time": "flexible", "location": "flexible"},
                },
            },
        )
        thread_id = started["thread_id"]
        report["thread_id"] = thread_id

        answered = {"alice": [], "bob": []}
        refused_without_elicitation = None
        with anyio.fail_after(90):
            while True:
                for name, h in (("alice", alice), ("bob", bob)):
                    for p in await h.tool("prompts"):
                        pid = p["id"]
                        if name == "alice" and refused_without_elicitation is None:
                            # A host that cannot ask its person is refused; the prompt stays.
                            r = await plain.session.call_tool("answer", {"prompt_id": pid})
                            text = " ".join(c.text for c in r.content)
                            expect(r.is_error, f"a host without elicitation answered: {text}")
                            expect("cannot ask the person" in text, text)
                            still = [q["id"] for q in await h.tool("prompts")]
                            expect(pid in still, "the prompt closed without the person")
                            refused_without_elicitation = text
                        await h.tool("answer", {"prompt_id": pid})
                        answered[name].append(next(iter(p["kind"])))
                states = (await state(alice, thread_id), await state(bob, thread_id))
                if states == ("COMPLETED", "COMPLETED"):
                    break
                expect(
                    all(s not in ("DECLINED", "EXPIRED", "FAILED") for s in states),
                    f"thread ended {states}",
                )
                alice.signal = anyio.Event()
                with anyio.move_on_after(2):
                    await alice.signal.wait()

        report["answered"] = answered
        report["asked"] = {"alice": len(alice_person.asked), "bob": len(bob_person.asked)}
        report["refused_without_elicitation"] = refused_without_elicitation is not None
        expect(answered["alice"] and answered["bob"], f"answers {answered}")

        # The thread as a resource.
        contents = await alice.session.read_resource(f"a2acp://thread/{thread_id}")
        detail = json.loads(contents.contents[0].text)
        expect(detail["state"] == "COMPLETED", f"resource says {detail['state']}")
        listed = {str(r.uri) for r in (await alice.session.list_resources()).resources}
        expect(f"a2acp://thread/{thread_id}" in listed, f"resources {listed}")

        # The person refuses to loosen a permission: nothing changes.
        before = await alice.tool("permissions")
        await alice.tool(
            "set_permission", {"field": "health", "tier": "always_share"}, error=True
        )
        expect(await alice.tool("permissions") == before, "a refused permission changed")
        # Narrowing needs no question.
        await alice.tool("set_permission", {"field": "budget_range", "tier": "never_share"})

        # Subscribed hosts heard of the prompts and of the thread's progress.
        report["alice_updates"] = len(alice.updated)
        report["bob_updates"] = len(bob.updated)
        expect("a2acp://prompts" in bob.updated, f"bob heard {bob.updated}")
        expect("a2acp://threads" in alice.updated, f"alice heard {alice.updated}")
    print(json.dumps(report))


if __name__ == "__main__":
    try:
        anyio.run(main, json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3])
    except Failed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
