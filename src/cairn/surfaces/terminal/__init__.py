"""The terminal surface: ``cairn`` with no arguments opens ``CairnApp`` (Textual)."""

from __future__ import annotations

from cairn.surfaces.terminal.app import CairnApp

__all__ = ["CairnApp"]
