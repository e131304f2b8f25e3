"""The ``mcpServers`` section of ``settings.json``: Claude Code's shape, validated.

A stdio server is a command Cairn starts (in the workspace, with the SDK's
safe environment — ``HOME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``,
``LOGNAME`` — plus ``env``)::

    {"mcpServers": {"github": {"command": "github-mcp", "args": ["stdio"],
                               "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}}}}

A streamable-HTTP server is a URL, with optional headers (``"type": "http"``
may be given; it is implied by ``url``)::

    {"mcpServers": {"docs": {"url": "https://example.com/mcp",
                             "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}}}

``${VAR}`` and ``${VAR:-default}`` in ``command``, ``args``, ``env``, ``url``
and ``headers`` are replaced from Cairn's environment when the server starts,
so a secret need not be written in the file; an unset variable without a
default keeps that server from starting (one notice names it).

``timeout`` is the per-call deadline in seconds (default 60): a call that
gets no answer in time counts as a hung server. ``startup_timeout`` bounds
the start, the handshake and the tool listing (default 30 s).

Server names become part of tool names (``mcp__<server>__<tool>``), which
OpenAI-compatible APIs limit to letters, digits, ``_`` and ``-``: a name is
validated to those.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Literal, TypeAlias

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from cairn.errors import CairnError

#: The per-call deadline when a server sets no ``timeout`` (seconds).
DEFAULT_CALL_TIMEOUT_S = 60.0
#: The start deadline when a server sets no ``startup_timeout`` (seconds).
DEFAULT_STARTUP_TIMEOUT_S = 30.0

_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

Transport: TypeAlias = Literal["stdio", "http"]


class McpConfigError(CairnError, ValueError):
    """A server's configuration cannot be used as it stands (an unset variable)."""


def _server_name(name: str) -> str:
    if not _SERVER_NAME.fullmatch(name):
        raise ValueError(
            f"server name {name!r} may hold only letters, digits, '_' and '-' "
            "(it becomes part of the tool names)"
        )
    return name


ServerName: TypeAlias = Annotated[str, AfterValidator(_server_name)]
_Seconds: TypeAlias = Annotated[float, Field(gt=0, allow_inf_nan=False, strict=True)]


class McpServerConfig(BaseModel):
    """One entry of ``mcpServers``: a stdio command or a streamable-HTTP URL."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: ``stdio`` or ``http``; implied by ``command`` / ``url`` when left out.
    type: Transport | None = None
    command: str | None = Field(default=None, min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    #: Seconds one tool call may take before the server counts as hung.
    timeout: _Seconds = DEFAULT_CALL_TIMEOUT_S
    #: Seconds the start (process or connection, handshake, tool list) may take.
    startup_timeout: _Seconds = DEFAULT_STARTUP_TIMEOUT_S

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "needs either 'command' (a stdio server) or 'url' (a streamable-HTTP server)"
            )
        if self.type is not None and self.type != self.transport:
            wanted = "'command'" if self.type == "stdio" else "'url'"
            raise ValueError(f"type {self.type!r} needs {wanted}")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
        if self.command is None and (self.args or self.env):
            raise ValueError("'args' and 'env' belong to a stdio server ('command')")
        if self.url is None and self.headers:
            raise ValueError("'headers' belong to an HTTP server ('url')")
        return self

    @property
    def transport(self) -> Transport:
        return "stdio" if self.command is not None else "http"


#: ``mcpServers``: server name → its configuration.
McpServers: TypeAlias = dict[ServerName, McpServerConfig]


def expand_env(text: str, where: str) -> str:
    """``text`` with ``${VAR}`` / ``${VAR:-default}`` replaced from the environment.

    ``where`` names the key in the error an unset variable raises.
    """

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = os.environ.get(name)
        if value is not None:
            return value
        if default is not None:
            return default
        raise McpConfigError(f"environment variable {name} is not set ({where})")

    return _VARIABLE.sub(replace, text)
