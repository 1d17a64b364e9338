"""Fixtures of the 2025-06-18 interop tests (`test_2025_06_18_deploy.py`).

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
