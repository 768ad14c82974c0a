"""A plain A2A v1.0 agent built on the official a2a-sdk's SERVER side (1.3.0, unmodified):
a restaurant that books a table. An a2acp agent negotiates with it
(`tests/tests/a2a_client.rs`): the first message of a task asks for input once
(TASK_STATE_INPUT_REQUIRED, the needs as a data part), the answer completes the task with
a proposal artifact.

Usage: server.py LOGFILE — binds 127.0.0.1 on a free port, prints `PORT <n>` on stdout,
and appends every message it receives to LOGFILE (one JSON object a line: task, context,
text, data; a cancelled task as {"cancelled": task}), so the test checks what reached it.
"""

import asyncio
import json
import socket
import sys

import uvicorn
from starlette.applications import Starlette

from a2a.helpers.proto_helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.server.agent_execution.agent_executor import AgentExecutor
from a2a.server.agent_execution.context import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Task,
    TaskState,
    TaskStatus,
)

LOG = sys.argv[1]


def log(entry):
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


class Restaurant(AgentExecutor):
    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        log({"cancelled": context.task_id})
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        task_id, context_id = context.task_id, context.context_id
        data = {}
        for d in get_data_parts(message.parts):
            if isinstance(d, dict):
                data.update(d)
        text = "\n".join(get_text_parts(message.parts))
        log({"task": task_id, "context": context_id, "text": text, "data": data})
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[message],
                )
            )
            ask = updater.new_agent_message(
                parts=[
                    new_text_part("How many guests, and any dietary needs?"),
                    new_data_part(
                        {
                            "needs": [
                                {"field": "party_size", "reason": "to size the table", "priority": "required"},
                                {"field": "dietary_restrictions", "reason": "to tell the kitchen", "priority": "helpful"},
                                {"field": "health_info", "reason": "allergies", "priority": "helpful"},
                            ]
                        }
                    ),
                ]
            )
            await updater.requires_input(message=ask)
            return
        guests = int(data.get("party_size", 2))
        diet = data.get("dietary_restrictions", "none given")
        summary = f"Table for {guests} at Chez Sdk, 19:30 (dietary: {diet})"
        await updater.add_artifact(
            parts=[
                new_text_part(summary),
                new_data_part({"restaurant": "Chez Sdk", "time": "19:30", "party_size": guests}),
            ],
            name="proposal",
            last_chunk=True,
        )
        await updater.complete(
            message=updater.new_agent_message(parts=[new_text_part("Booked, pending your confirmation.")])
        )


async def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    card = AgentCard(
        name="Chez Sdk",
        description="A restaurant's booking agent (a2a-sdk server).",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="book",
                name="Book a table",
                description="Books a table.",
                tags=["booking"],
            )
        ],
        supported_interfaces=[
            AgentInterface(protocol_binding="GRPC", protocol_version="1.0", url=f"127.0.0.1:{port + 1}"),
            AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=f"http://127.0.0.1:{port}/a2a/jsonrpc"),
        ],
    )
    handler = DefaultRequestHandler(agent_executor=Restaurant(), task_store=InMemoryTaskStore(), agent_card=card)
    app = Starlette(
        routes=[
            *create_agent_card_routes(agent_card=card),
            *create_jsonrpc_routes(request_handler=handler, rpc_url="/a2a/jsonrpc"),
        ]
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    print(f"PORT {port}", flush=True)
    await server.serve(sockets=[sock])


asyncio.run(main())
