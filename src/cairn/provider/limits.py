"""The bounds every model figure is checked against, wherever it comes from.

A module of its own because both the model configuration (``config``) and the
model registry (``registry``, beneath it) check windows against the same
floor, and the registry must not import the configuration it feeds.
"""

from __future__ import annotations

#: The smallest window accepted anywhere: below it no request has room to work.
MIN_CONTEXT_WINDOW = 1_024
