"""The browser UI tests' fixtures: ``web`` starts the app, ``browser`` and ``page`` drive it."""

from __future__ import annotations

from support.web_browser import (  # noqa: F401  (the fixtures register themselves by import)
    browser_fixture,
    page_fixture,
    web_fixture,
)
