"""The context tests' fixtures."""

from __future__ import annotations

import pytest

from cairn.wire_apis import WIRE_APIS, WireAPI


@pytest.fixture(params=WIRE_APIS)
def wire_api(request: pytest.FixtureRequest) -> WireAPI:
    """Each wire API in turn: a test that takes it runs once per API, its body unchanged."""
    api: WireAPI = request.param
    return api
