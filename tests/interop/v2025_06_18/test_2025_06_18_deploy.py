"""Interop tests: the Python `mcp==1.10.0` client, which speaks 2025-06-18, against the `deploy`
example with the legacy bridge on.

2025-06-18 has no priming events (an id and an empty `data` opening a stream, SEP-1699, which
came with 2025-11-25); this client parses every event's `data` as a JSON-RPC message and reports
an empty one as an error, to its log and to the session. So beside the flows themselves, every
test here checks that the client saw no broken message on any stream: the call's, the plain
request's and the session's GET stream, which it opens after `initialize`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client

pytestmark = pytest.mark.anyio

TEST_TIMEOUT_S = 30.0


@dataclass
class User:
    """Answers every question with `answers` in turn; keeps what was asked and any error the
    client's transport handed the session instead of a message."""

    answers: list[types.ElicitResult]
    asked: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params.message)
        return self.answers[len(self.asked) - 1]

    async def on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.broken.append(repr(message))


async def session_calls(url: str, user: User, *calls: tuple[str, dict[str, Any]]) -> list[types.CallToolResult]:
    """Opens one session, makes `calls` in it, and closes it (the GET stream lives meanwhile)."""
    results = []
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with streamablehttp_client(url) as (read, write, _):
            async with ClientSession(
                read, write, elicitation_callback=user, message_handler=user.on_message
            ) as session:
                init = await session.initialize()
                assert init.protocolVersion == "2025-06-18"
                assert init.serverInfo.name == "deploy-example"
                tools = await session.list_tools()
                assert "deploy" in [tool.name for tool in tools.tools]
                for name, arguments in calls:
                    results.append(await session.call_tool(name, arguments))
    return results


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def broken_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("mcp")]


async def test_a_question_is_asked_and_answered_with_no_broken_message(url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    user = User([
        types.ElicitResult(action="accept", content={"approve": "yes"}),
        types.ElicitResult(action="accept", content={"approve": True}),
    ])
    [result] = await session_calls(url, user, ("deploy", {"environment": "staging"}))
    assert not result.isError, text_of(result)
    assert result.structuredContent == {"environment": "staging", "deployed": True}
    # The invalid answer was asked again, with the layer's hint; the handler never saw it.
    assert len(user.asked) == 2 and user.asked[0] == "Deploy to 'staging'?"
    assert user.asked[1].startswith("Deploy to 'staging'?") and user.asked[1] != user.asked[0]
    assert user.broken == []
    assert broken_messages(caplog) == []


async def test_plain_calls_and_a_declined_question_with_no_broken_message(url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    user = User([types.ElicitResult(action="decline")])
    listed, declined = await session_calls(
        url, user, ("list_branches", {}), ("deploy", {"environment": "production"})
    )
    assert not listed.isError and "main" in text_of(listed)
    assert "not approved" in text_of(declined)
    assert user.broken == []
    assert broken_messages(caplog) == []
