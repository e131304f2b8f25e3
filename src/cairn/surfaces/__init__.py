"""Surfaces: the ways people reach Cairn (terminal commands, editors, the browser).

Each surface talks to the layers below it and is reached from ``cairn.cli``,
which only parses arguments and dispatches. ``cairn.surfaces.inspect`` backs
``cairn inspect``.
"""
