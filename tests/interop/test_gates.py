"""Interop tests: the Python `mcp==2.3.0` client against the `deploy` example's gated tools.

`delete_branch` and `connect_github` are ordinary rmcp handlers with no elicitation code: the
layer's gates ask before the call can reach them (see `examples/deploy/server.rs`). The server
must be running; its endpoint is read from `MCP_INTEROP_URL` (`scripts/interop.sh` starts it).
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, types
from mcp.client.session import ClientRequestContext

pytestmark = pytest.mark.anyio

CONFIRM_KEY = "confirm-delete"
GITHUB_KEY = "github-authorization"
NOT_DELETED = "Branch was not deleted."
TEST_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 15.0


@dataclass
class Seen:
    """One elicitation as the client handed it to the callback."""

    key: str | int
    mode: str | None
    message: str
    url: str | None


@dataclass
class User:
    """An elicitation callback that answers with `answer(seen)` and records every round."""

    answer: Any
    rounds: list[Seen] = field(default_factory=list)

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        seen = Seen(
            key=context.request_id,
            mode=params.mode,
            message=params.message,
            url=getattr(params, "url", None),
        )
        self.rounds.append(seen)
        if len(self.rounds) > 5:
            return types.ErrorData(code=-1, message="too many rounds")
        return await self.answer(seen, len(self.rounds))


async def call(url: str, tool: str, arguments: dict[str, Any], user: User | None) -> types.CallToolResult:
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with Client(
            url, mode="2026-07-28", elicitation_callback=user, read_timeout_seconds=READ_TIMEOUT_S
        ) as client:
            try:
                return await client.call_tool(tool, arguments)
            except MCPError as error:
                pytest.fail(f"{tool} failed with JSON-RPC error {error.code}: {error.message}")


async def branches(url: str) -> list[str]:
    result = await call(url, "list_branches", {}, None)
    assert not result.is_error
    return result.structured_content["branches"]


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def typing(name: str) -> Any:
    async def answer(seen: Seen, _round: int) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"confirm": name})

    return answer


async def test_delete_branch_asks_again_when_the_typed_name_differs(url: str) -> None:
    assert "dev" in await branches(url)

    async def answer(seen: Seen, round_: int) -> types.ElicitResult:
        # A typo, then the user gives up.
        if round_ == 1:
            return types.ElicitResult(action="accept", content={"confirm": "main"})
        return types.ElicitResult(action="decline")

    user = User(answer)
    result = await call(url, "delete_branch", {"name": "dev"}, user)
    assert result.is_error is True
    assert text_of(result) == NOT_DELETED
    asked = "Delete the branch 'dev'? Type its name to confirm."
    assert [(r.key, r.mode, r.message) for r in user.rounds] == [
        (CONFIRM_KEY, "form", asked),
        # The retry hint is on the form's one field; the message names it.
        (CONFIRM_KEY, "form", asked + "\n\nPlease correct: Branch name."),
    ]
    assert "dev" in await branches(url)


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_delete_branch_refused_on_decline_and_cancel(url: str, action: str) -> None:
    async def answer(seen: Seen, _round: int) -> types.ElicitResult:
        return types.ElicitResult(action=action)

    result = await call(url, "delete_branch", {"name": "dev"}, User(answer))
    assert result.is_error is True
    assert text_of(result) == NOT_DELETED
    assert "dev" in await branches(url)


async def test_delete_branch_confirmed(url: str) -> None:
    assert "feature-x" in await branches(url)
    user = User(typing("feature-x"))
    result = await call(url, "delete_branch", {"name": "feature-x"}, user)
    assert not result.is_error, text_of(result)
    assert text_of(result) == "Deleted branch feature-x"
    assert len(user.rounds) == 1
    assert "feature-x" not in await branches(url)


def fetch(address: str) -> str:
    with urllib.request.urlopen(address, timeout=10) as response:  # noqa: S310 (loopback test server)
        return response.read().decode()


async def test_connect_github_url_flow_is_verified_on_the_server(url: str) -> None:
    async def answer(seen: Seen, round_: int) -> types.ElicitResult:
        if round_ == 2:
            # The user finishes the flow in the browser; the server's callback marks it complete.
            page = await anyio.to_thread.run_sync(fetch, seen.url + "/complete")
            assert "authorized" in page
        # Round 1: consent without finishing the flow, which is not enough.
        return types.ElicitResult(action="accept")

    user = User(answer)
    result = await call(url, "connect_github", {"account": "octocat"}, user)
    assert not result.is_error, text_of(result)
    assert text_of(result) == "Connected octocat"
    assert len(user.rounds) == 2
    first, second = user.rounds
    assert (first.key, first.mode, first.message) == (GITHUB_KEY, "url", "Authorize GitHub access for 'octocat'.")
    assert first.url is not None and "/flows/" in first.url
    assert second.url == first.url, "an incomplete flow is asked again with the same URL"
    assert second.message == first.message + "\n\nNot finished yet: complete it in the browser, then continue."
