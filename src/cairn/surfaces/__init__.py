"""Surfaces: the ways people reach Cairn (terminal commands, editors, the browser).

Each surface talks to the layers below it and is reached from ``cairn.cli``,
which only parses arguments and dispatches. The surfaces that run a session
(``cairn -p``, the terminal app, ``cairn acp``, ``cairn web``) share their
flags and their setup (``cairn.surfaces.setup``) and drive it through the
API ``cairn.agent`` exports. ``cairn.surfaces.inspect`` backs ``cairn inspect``.
"""
