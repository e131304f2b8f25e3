"""Prompt texts, kept as files so they can be read and reviewed as prose."""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def load_prompt(name: str) -> str:
    """The text of ``cairn/prompts/<name>.txt`` without its trailing newline."""
    return files(__package__).joinpath(f"{name}.txt").read_text(encoding="utf-8").rstrip("\n")
