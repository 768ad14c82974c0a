"""An unmodified official A2A client (`a2a-sdk` 1.3.x) negotiating with an a2acp agent.

Usage: negotiate.py [--binding HTTP+JSON] BASE_URL [TOKEN] [DATE]

Resolves the agent card from BASE_URL, then over the card's JSON-RPC interface (or, with
`--binding HTTP+JSON`, its HTTP+JSON one: the SDK's REST transport, chosen by the
client's `supported_protocol_bindings`):
1. sends a message that starts a negotiation (a dinner on Friday) and polls the task
   until it is input-required (the agent's user answers its consent prompt meanwhile,
   through the control socket: the Rust test does that);
2. answers what is needed with a data part, then confirms the proposal (the artifact)
   with data {"decision": "confirm"}, and polls until the task is completed;
3. starts another task and cancels it;
4. lists its tasks (all, by status, by context);
5. streams a third task (SendStreamingMessage): the task first, then updates, the stream
   closing at input-required; answers, and subscribes to it (SubscribeToTask).
Prints one JSON line with what it saw; exits non-zero on any surprise.
"""

import asyncio
import json
import sys

import httpx
from google.protobuf import json_format

from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)

INPUT_REQUIRED = TaskState.Name(TaskState.TASK_STATE_INPUT_REQUIRED)
COMPLETED = TaskState.Name(TaskState.TASK_STATE_COMPLETED)
CANCELED = TaskState.Name(TaskState.TASK_STATE_CANCELED)


def message(n, text=None, data=None, task_id=None):
    parts = []
    if text:
        parts.append({"text": text})
    if data:
        parts.append({"data": data})
    m = {"messageId": f"msg-{n}", "role": "ROLE_USER", "parts": parts}
    if task_id:
        m["taskId"] = task_id
    return SendMessageRequest(message=json_format.ParseDict(m, Message()))


def state(task):
    return TaskState.Name(task.status.state)


async def one(client, req):
    """SendMessage (non-streaming client): the task of its one response."""
    async for ev in client.send_message(req):
        assert ev.HasField("task"), ev
        return ev.task
    raise AssertionError("no response")


async def until(client, task_id, want, secs=60):
    for _ in range(secs * 10):
        t = await client.get_task(GetTaskRequest(id=task_id))
        if state(t) == want:
            return t
        await asyncio.sleep(0.1)
    raise AssertionError(f"task {task_id} never reached {want}: {json_format.MessageToDict(t)}")


def awaiting(task):
    data = json_format.MessageToDict(task.status.message).get("parts", [{}, {}])[1].get("data", {})
    return data.get("awaiting")


async def main():
    args = sys.argv[1:]
    bindings = []
    if args[:1] == ["--binding"]:
        bindings = [args[1]]
        args = args[2:]
    base = args[0]
    token = args[1] if len(args) > 1 else None
    date = args[2] if len(args) > 2 else "2026-03-27"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    report = {}
    http = httpx.AsyncClient(headers=headers, timeout=30)
    polling = ClientFactory(ClientConfig(
        streaming=False, httpx_client=http, supported_protocol_bindings=bindings))
    client = await polling.create_from_url(base)
    card = client._card
    report["card_name"] = card.name
    report["protocol_version"] = card.supported_interfaces[0].protocol_version
    report["binding"] = card.supported_interfaces[0].protocol_binding
    report["bindings"] = [i.protocol_binding for i in card.supported_interfaces]
    report["transport"] = type(client._transport).__name__
    report["streaming"] = card.capabilities.streaming

    # 1. A negotiation: the dinner.
    task = await one(client, message(1, "Dinner with Bob on Friday?", {
        "proposed_date": date,
        "dietary": ["vegetarian"], "party_size": 2,
    }))
    tid = task.id
    report["task_id"] = tid
    report["context_id"] = task.context_id
    report["first_state"] = state(task)
    task = await until(client, tid, INPUT_REQUIRED)
    assert awaiting(task) == "context", json_format.MessageToDict(task)
    needs = json_format.MessageToDict(task.status.message)["parts"][1]["data"]["needs"]
    report["needs"] = sorted(n["field"] for n in needs)
    answer = {"time_windows": ["18:00-21:00"], "timezone": "Europe/London",
              "location_preference": "central Reading", "transport_mode": "walking",
              "cuisine_preference": "Italian", "budget_range": "£20-40pp"}
    # 2. Answer until a proposal waits for our decision, then confirm it.
    for n in range(2, 6):
        task = await one(client, message(n, None, answer, tid))
        task = await until(client, tid, INPUT_REQUIRED)
        if awaiting(task) == "decision":
            break
    assert awaiting(task) == "decision", json_format.MessageToDict(task)
    report["artifact"] = task.artifacts[0].name
    report["proposal"] = task.artifacts[0].parts[0].text
    task = await one(client, message(9, "confirm", {"decision": "confirm"}, tid))
    task = await until(client, tid, COMPLETED)
    report["final_state"] = state(task)
    report["history_len"] = len(task.history)
    got = await client.get_task(GetTaskRequest(id=tid, history_length=2))
    report["history_2"] = len(got.history)

    # 3. Another task, cancelled.
    other = await one(client, message(10, "Lunch on Monday?", {"proposed_date": "2026-03-30"}))
    cancelled = await client.cancel_task(CancelTaskRequest(id=other.id))
    report["cancelled_state"] = state(cancelled)
    report["cancelled_id"] = other.id
    try:
        await client.cancel_task(CancelTaskRequest(id=other.id))
        report["cancel_again"] = "accepted"
    except Exception as e:  # the SDK's TaskNotCancelableError
        report["cancel_again"] = type(e).__name__
    try:
        await client.get_task(GetTaskRequest(id="thr_nosuchtask"))
        report["unknown_task"] = "found"
    except Exception as e:
        report["unknown_task"] = type(e).__name__

    # 4. The list.
    listed = await client.list_tasks(ListTasksRequest())
    report["listed"] = sorted(t.id for t in listed.tasks)
    listed = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_CANCELED))
    report["listed_canceled"] = [t.id for t in listed.tasks]
    listed = await client.list_tasks(ListTasksRequest(context_id=other.context_id, page_size=5))
    report["listed_context"] = [t.id for t in listed.tasks]

    # 5. Streaming: the SDK's streaming client.
    streaming = ClientFactory(ClientConfig(
        streaming=True, httpx_client=http, supported_protocol_bindings=bindings))
    sclient = await streaming.create_from_url(base)
    report["stream_transport"] = type(sclient._transport).__name__
    kinds = []
    stid = None
    async for ev in sclient.send_message(message(20, "A video call on Friday?", {"proposed_date": "2026-03-27"})):
        kind = ev.WhichOneof("payload")
        kinds.append(kind)
        if kind == "task":
            stid = ev.task.id
    report["stream_kinds"] = kinds
    report["stream_task"] = stid
    # The stream closed: the task waits for the agent's user, or for us. A subscription
    # stays open through input-required until the task is terminal: cancelling the task
    # once subscribed ends it.
    sub = []
    try:
        async for ev in sclient.subscribe(SubscribeToTaskRequest(id=stid)):
            kind = ev.WhichOneof("payload")
            sub.append(kind if kind != "status_update" else TaskState.Name(ev.status_update.status.state))
            if kind == "task":
                await client.cancel_task(CancelTaskRequest(id=stid))
    except Exception as e:
        sub.append(type(e).__name__)
    report["subscribe"] = sub
    await http.aclose()
    print(json.dumps(report))


asyncio.run(main())
