"""The agent runtime: settings, hooks, sessions, tools and the loop (DESIGN §7).

This layer sits above ``cairn.context``: it implements the protocols the
pipeline asks for (``CompactionHooks``, …) with real processes and files.
Surfaces use ``AgentSession`` (``cairn.agent.facade``), the one facade.
"""
