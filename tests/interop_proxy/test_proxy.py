"""The Python `mcp==2.3.0` client (2026-07-28) against `elicitation-proxy` over Streamable HTTP,
serving the shipped examples/proxy/filesystem.toml in front of server-filesystem: a read is not
asked at all; a `write_file` is asked with the gate's form and message, written on approval,
refused on decline; the client's own approving request, sent again byte for byte, is refused.

Every call goes through the client's own multi round-trip loop (`Client.call_tool` with an
`elicitation_callback`); the requests it sends are recorded from its HTTP client's hooks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import Proxy, post_json
from mcp import Client, MCPError, types
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio

TEST_TIMEOUT_S = 60.0
READ_TIMEOUT_S = 30.0
# The gate's refusal, then the call's decision id (the one its question's _meta carries).
GATE_REFUSAL = re.compile(r"The request was not approved\. \(decision d-[0-9a-f]{16}\)")
ASKED = 'elicitation_proxy_decisions_total{outcome="ask"}'
REPLAYS = "elicitation_proxy_replays_refused_total"


@dataclass
class User:
    """The elicitation callback: answers round N with `answers[N]`, records every round."""

    answers: list[types.ElicitResult]
    rounds: list[tuple[str | int, str, dict[str, Any]]] = field(default_factory=list)

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestFormParams), params
        schema = json.loads(
            json.dumps(params.requested_schema, default=lambda o: o.model_dump(by_alias=True, exclude_none=True))
        )
        self.rounds.append((context.request_id, params.message, schema))
        if len(self.rounds) > len(self.answers):
            return types.ErrorData(code=-1, message=f"unexpected round {len(self.rounds)}: {params.message!r}")
        return self.answers[len(self.rounds) - 1]


@dataclass
class Sent:
    """The `tools/call` requests the client sent: (headers, body)."""

    calls: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    async def __call__(self, request: httpx2.Request) -> None:
        body = request.content
        if b'"tools/call"' in body:
            self.calls.append((dict(request.headers), body))


async def call(
    proxy: Proxy, tool: str, arguments: dict[str, Any], user: User | None = None, sent: Sent | None = None
) -> types.CallToolResult:
    hooks = {"request": [sent]} if sent is not None else {}
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with httpx2.AsyncClient(timeout=READ_TIMEOUT_S, event_hooks=hooks) as http:
            async with Client(
                streamable_http_client(proxy.url, http_client=http),
                mode="2026-07-28",
                elicitation_callback=user,
                read_timeout_seconds=READ_TIMEOUT_S,
            ) as client:
                try:
                    return await client.call_tool(tool, arguments)
                except MCPError as error:
                    pytest.fail(f"{tool} failed with JSON-RPC error {error.code}: {error.message} {error.data!r}")


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_a_read_is_not_asked(proxy: Proxy, data: Path) -> None:
    before = proxy.metric(ASKED)
    user = User([])
    result = await call(proxy, "read_text_file", {"path": str(data / "hello.txt")}, user)
    assert not result.is_error, text_of(result)
    assert text_of(result) == (data / "hello.txt").read_text()
    assert user.rounds == []
    assert proxy.metric(ASKED) == before


async def test_a_write_is_asked_with_the_gates_form_and_written_on_approval(proxy: Proxy, data: Path) -> None:
    path = data / "approved.txt"
    user = User([types.ElicitResult(action="accept", content={"approve": True, "reason": "interop"})])
    result = await call(proxy, "write_file", {"path": str(path), "content": "approved\n"}, user)
    assert not result.is_error, text_of(result)
    assert "Successfully wrote" in text_of(result)
    assert path.read_text() == "approved\n"
    ((key, message, schema),) = user.rounds
    assert key == "approval"
    assert message.startswith(f'Write to "{path}"?\n\nArguments:\n'), message
    assert '\n- content: "approved\\n"' in message, message
    assert schema["properties"]["approve"]["type"] == "boolean"
    assert schema["properties"]["approve"]["description"] == "Let the assistant write this file"
    assert schema["properties"]["reason"] == {"type": "string", "title": "Reason", "maxLength": 200}


@pytest.mark.parametrize(
    "answer",
    [
        types.ElicitResult(action="decline"),
        types.ElicitResult(action="cancel"),
        types.ElicitResult(action="accept", content={"approve": False}),
    ],
    ids=["decline", "cancel", "approve-false"],
)
async def test_a_write_refused_is_not_written(proxy: Proxy, data: Path, answer: types.ElicitResult) -> None:
    path = data / f"refused-{answer.action}.txt"
    user = User([answer])
    result = await call(proxy, "write_file", {"path": str(path), "content": "nope\n"}, user)
    assert result.is_error is True
    assert GATE_REFUSAL.fullmatch(text_of(result)), text_of(result)
    assert not path.exists()
    assert len(user.rounds) == 1


async def test_the_clients_approving_request_sent_again_is_refused(proxy: Proxy, data: Path) -> None:
    path = data / "once.txt"
    user = User([types.ElicitResult(action="accept", content={"approve": True})])
    sent = Sent()
    result = await call(proxy, "write_file", {"path": str(path), "content": "once\n"}, user, sent)
    assert path.read_text() == "once\n", text_of(result)
    # The first request and the retry carrying the approval and its requestState.
    assert len(sent.calls) == 2, sent.calls
    headers, body = sent.calls[1]
    params = json.loads(body)["params"]
    assert params["inputResponses"]["approval"]["action"] == "accept", params
    assert params.get("requestState"), params

    path.unlink()
    replays = proxy.metric(REPLAYS)
    keep = {k: v for k, v in headers.items() if k.lower() in ("content-type", "accept") or k.lower().startswith("mcp-")}
    reply = post_json(proxy.url, body, keep)
    assert reply.get("error", {}).get("code") == -32602, reply
    assert not path.exists()
    assert proxy.metric(REPLAYS) == replays + 1
