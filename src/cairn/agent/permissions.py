"""Permission questions as requests: a call that needs the user's word waits for a surface.

A tool call the permission mode does not allow by itself publishes
``permissionRequested`` and waits; the surface answers with one of the
``PERMISSION_OPTIONS`` (``Session.answer``), and a cancel answers every
waiting question as ``cancelled``. ``allow_always`` lets that tool run for
the rest of the session without asking again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal, TypeAlias, get_args

from cairn.agent.events import Event, PermissionRequested
from cairn.agent.tools.base import PermissionRequest
from cairn.messages import new_id

#: What a surface may answer to ``permissionRequested`` (``cancelled`` is what a cancel sends).
PermissionDecision: TypeAlias = Literal["allow_once", "allow_always", "reject", "cancelled"]
PERMISSION_DECISIONS: tuple[PermissionDecision, ...] = get_args(PermissionDecision)
PERMISSION_OPTIONS: tuple[str, ...] = ("allow_once", "allow_always", "reject")


class PermissionRequests:
    """One session's questions waiting for an answer, and the tools allowed for good."""

    def __init__(self, publish: Callable[[Event], None]) -> None:
        self._publish = publish
        self._waiting: dict[str, asyncio.Future[PermissionDecision]] = {}
        self._always_allowed: set[str] = set()

    async def ask(self, request: PermissionRequest) -> bool:
        """Publish ``permissionRequested`` and wait for ``answer``; true when allowed."""
        if request.tool in self._always_allowed:
            return True
        permission_id = new_id("perm")
        waiting: asyncio.Future[PermissionDecision] = asyncio.get_running_loop().create_future()
        self._waiting[permission_id] = waiting
        try:
            self._publish(
                PermissionRequested(
                    permission_id,
                    request.tool,
                    request.arguments,
                    PERMISSION_OPTIONS,
                    request.summary,
                )
            )
            decision = await waiting
        finally:
            self._waiting.pop(permission_id, None)
        if decision == "allow_always":
            self._always_allowed.add(request.tool)
        return decision in ("allow_once", "allow_always")

    def answer(self, permission_id: str, decision: PermissionDecision) -> bool:
        """Answer a pending ``permissionRequested``; false when nothing waits under that id."""
        if decision not in PERMISSION_DECISIONS:
            allowed = ", ".join(PERMISSION_DECISIONS)
            raise ValueError(f"unknown permission decision {decision!r}; one of {allowed}")
        waiting = self._waiting.get(permission_id)
        if waiting is None or waiting.done():
            return False
        waiting.set_result(decision)
        return True

    def cancel_all(self) -> None:
        """Answer every waiting question as ``cancelled``."""
        for permission_id in list(self._waiting):
            self.answer(permission_id, "cancelled")
