"""Interop tests: the Python `mcp==1.30.0` client (2025-11-25: a session, `initialize`, and
elicitation as server-to-client requests) against the `deploy` example with the legacy bridge on.

Every question here is asked by the 2026-07-28 server (or the `ElicitationLayer`'s gates and
re-asks) as an `input_required` result; the bridge turns each into an `elicitation/create`
request on the call's event stream, and the callback's answer into the retry. The client knows
nothing of multi round-trip requests.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import anyio
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio

NOT_APPROVED = "Deployment was not approved."
NOT_DELETED = "Branch was not deleted."
TEST_TIMEOUT_S = 30.0


@dataclass
class Asked:
    mode: str
    message: str
    url: str | None
    elicitation_id: str | None
    schema: dict[str, Any] | None


@dataclass
class User:
    """The elicitation callback: records what was asked, answers with `answer(asked, round)`."""

    answer: Callable[[Asked, int], Awaitable[types.ElicitResult]]
    asked: list[Asked] = field(default_factory=list)
    notifications: list[str] = field(default_factory=list)

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        if isinstance(params, types.ElicitRequestURLParams):
            asked = Asked("url", params.message, params.url, params.elicitationId, None)
        else:
            asked = Asked("form", params.message, None, None, params.requestedSchema)
        self.asked.append(asked)
        return await self.answer(asked, len(self.asked))

    async def on_message(self, message: Any) -> None:
        root = getattr(message, "root", None)
        method = getattr(root, "method", None)
        if isinstance(method, str):
            self.notifications.append(method)


def answering(*results: types.ElicitResult) -> User:
    async def answer(_asked: Asked, round_: int) -> types.ElicitResult:
        return results[round_ - 1]

    return User(answer)


async def call(url: str, tool: str, arguments: dict[str, Any], user: User | None = None) -> types.CallToolResult:
    user = user or answering()
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with streamable_http_client(url) as (read, write, _):
            async with ClientSession(
                read, write, elicitation_callback=user, message_handler=user.on_message
            ) as session:
                init = await session.initialize()
                assert init.protocolVersion == "2025-11-25"
                assert init.serverInfo.name == "deploy-example"
                return await session.call_tool(tool, arguments)


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def accept(**content: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content=content)


async def test_deploy_accepted(url: str) -> None:
    user = answering(accept(approve=True))
    result = await call(url, "deploy", {"environment": "staging"}, user)
    assert not result.isError, text_of(result)
    assert result.structuredContent == {"environment": "staging", "deployed": True}
    assert [a.message for a in user.asked] == ["Deploy to 'staging'?"]
    assert user.asked[0].schema is not None and user.asked[0].schema["required"] == ["approve"]


async def test_deploy_re_asked_with_the_hint_after_an_invalid_answer(url: str) -> None:
    user = answering(accept(approve="yes"), accept(approve=True))
    result = await call(url, "deploy", {"environment": "production"}, user)
    assert not result.isError, text_of(result)
    first, second = user.asked
    assert first.message == "Deploy to 'production'?"
    assert second.message.startswith(first.message + "\n\n"), second.message
    assert "approve" in second.message.lower()


async def test_deploy_declined(url: str) -> None:
    user = answering(types.ElicitResult(action="decline"))
    result = await call(url, "deploy", {"environment": "staging"}, user)
    assert result.isError
    assert text_of(result) == NOT_APPROVED


async def branches(url: str) -> list[str]:
    result = await call(url, "list_branches", {})
    assert result.structuredContent is not None
    return list(result.structuredContent["branches"])


async def test_delete_branch_refused(url: str) -> None:
    assert "main" in await branches(url)
    user = answering(types.ElicitResult(action="decline"))
    result = await call(url, "delete_branch", {"name": "main"}, user)
    assert result.isError
    assert text_of(result) == NOT_DELETED
    assert user.asked[0].message == "Delete the branch 'main'? Type its name to confirm."
    assert "main" in await branches(url)


async def test_delete_branch_confirmed(url: str) -> None:
    assert "dev" in await branches(url)
    user = answering(accept(confirm="dev"))
    result = await call(url, "delete_branch", {"name": "dev"}, user)
    assert not result.isError, text_of(result)
    assert text_of(result) == "Deleted branch dev"
    assert "dev" not in await branches(url)


def fetch(address: str) -> str:
    with urllib.request.urlopen(address, timeout=10) as response:  # noqa: S310 (loopback test server)
        return response.read().decode()


async def test_connect_github_url_flow_completed_on_the_server(url: str) -> None:
    async def answer(asked: Asked, _round: int) -> types.ElicitResult:
        assert asked.url is not None

        async def finish_later() -> None:
            # The user finishes the flow in the browser after consenting; the server's callback
            # marks it complete. Until then the bridge asks the server again, not the user.
            await anyio.sleep(0.3)
            page = await anyio.to_thread.run_sync(fetch, asked.url + "/complete")
            assert "authorized" in page

        task_group.start_soon(finish_later)
        return types.ElicitResult(action="accept")

    user = User(answer)
    async with anyio.create_task_group() as task_group:
        result = await call(url, "connect_github", {"account": "legacy-octocat"}, user)
    assert not result.isError, text_of(result)
    assert text_of(result) == "Connected legacy-octocat"
    assert len(user.asked) == 1, "consent is asked once; the flow's completion is checked on the server"
    (asked,) = user.asked
    assert asked.mode == "url"
    assert asked.message == "Authorize GitHub access for 'legacy-octocat'."
    assert asked.elicitation_id, "2025-11-25 URL elicitation carries an elicitationId"
    assert "notifications/elicitation/complete" in user.notifications
