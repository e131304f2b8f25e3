"""``cairn acp``: serve the Agent Client Protocol on stdin/stdout, as editors spawn agents.

stdout carries protocol messages and nothing else: the process's own file
descriptor 1 is pointed at stderr before anything runs, so a stray print or
a child process that inherits it cannot corrupt the stream; the protocol
writes to a duplicate of the original stdout. Logs go to stderr.

The model is resolved as ``cairn -p`` resolves it (settings of the folder
``cairn acp`` starts in, then the environment, then the flags); each
session's own settings (hooks, compaction) come from its ``cwd``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from dataclasses import dataclass

from acp.connection import Connection
from acp.stdio import stdio_streams

from cairn.agent import PermissionMode
from cairn.provider import ModelConfig, open_provider
from cairn.surfaces.acp.channel import Channel
from cairn.surfaces.acp.requests import CANCEL_REQUEST, InFlight
from cairn.surfaces.acp.server import AgentSetup, CairnAgent, agent_router
from cairn.surfaces.acp.transport import READ_CHUNK_BYTES, GuardedTransport, RefusedNotifications
from cairn.surfaces.setup import EXIT_USAGE, SetupError, SurfaceArgs, fail, load_cli_model


@dataclass(frozen=True, kw_only=True)
class AcpArgs(SurfaceArgs):
    """``cairn acp`` takes the flags every surface takes, no more."""


def run_acp(args: AcpArgs) -> int:
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="cairn acp: %(levelname)s %(message)s"
    )
    try:
        _, model = load_cli_model(args.workspace, args)
    except SetupError as exc:
        return fail(f"cairn acp: {exc}", EXIT_USAGE)
    _protect_stdout()
    asyncio.run(_serve_stdio(model, args.permission_mode, instructions=args.instructions))
    return 0


def _protect_stdout() -> None:
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # stdio_streams writes to sys.stdout: hand it the duplicate, and keep prints on stderr.
    sys.stdout = protocol  # the write pipe transport keeps it open from here on


async def _serve_stdio(
    model: ModelConfig, permission_mode: PermissionMode, *, instructions: bool = True
) -> None:
    reader, writer = await stdio_streams(limit=READ_CHUNK_BYTES)
    sys.stdout = sys.stderr
    async with open_provider(model) as provider:
        setup = AgentSetup(model, provider, permission_mode, instructions=instructions)
        await serve(setup, reader, writer)


async def serve(
    setup: AgentSetup, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Run one connection until the client closes it (the in-process tests call this too)."""
    agent: CairnAgent | None = None
    refused = RefusedNotifications()

    async def cooperative(method: str, params: object) -> bool:
        assert agent is not None
        return await agent.cancel_request(method, params)

    inflight = InFlight(cooperative)

    async def handle(method: str, params: object, is_notification: bool) -> object:
        assert agent is not None
        if method == "initialize":
            agent.observe_initialize(params)  # the raw capabilities, before the schema drops some
        if not is_notification:
            return await inflight.run(
                method, params, lambda: router(method, params, is_notification)
            )
        try:
            if method == CANCEL_REQUEST:
                await inflight.cancel(params)
                return None
            return await router(method, params, is_notification)
        except Exception as exc:
            # Nothing can answer a notification; the library would log a traceback for
            # each bad one, and a storm of them would bury the agent's stderr.
            refused.note(method, exc)
            return None

    connection = Connection(
        handle,
        GuardedTransport(reader, writer),
        listening=False,
        observers=[inflight.observe],  # each request's id, for $/cancel_request
    )
    channel = Channel(connection)
    agent = CairnAgent(setup, channel)
    # CairnAgent implements the methods Cairn supports; the router answers the
    # rest (fork, authenticate …) with "method not found".
    router = agent_router(agent)
    try:
        await connection.main_loop()
    finally:
        await agent.close()
        await channel.close()
        await connection.close()
