"""Fixtures shared by the interop tests (`test_deploy.py`, `test_gates.py`, and those in `legacy/`
and `v2025_06_18/`, each run by its own client).

The `deploy` example server must be running; its endpoint is read from `MCP_INTEROP_URL`
(`scripts/interop.sh` starts it and sets it).
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def url() -> str:
    value = os.environ.get("MCP_INTEROP_URL")
    if not value:
        pytest.fail("MCP_INTEROP_URL is not set (run scripts/interop.sh, or start the deploy example and export it)")
    return value
