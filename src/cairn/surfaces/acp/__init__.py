"""The editor agent: ``cairn acp`` speaks the Agent Client Protocol over stdio (DESIGN §8).

Zed, JetBrains and any ACP client spawn it and talk JSON-RPC on its stdin
and stdout. ``/compact`` is a command the agent runs (never a message to
the model), the compaction state travels as ``_cairn/…`` notifications and,
for clients that ask for them, the protocol's own compaction updates.
"""

from cairn.surfaces.acp.run import AcpArgs, run_acp, serve
from cairn.surfaces.acp.server import AgentSetup, CairnAgent

__all__ = ["AcpArgs", "AgentSetup", "CairnAgent", "run_acp", "serve"]
