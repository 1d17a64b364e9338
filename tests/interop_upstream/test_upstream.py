"""The Python `mcp==2.3.0` client (2026-07-28) against real 2025-era MCP servers behind `front`
(and a 2026-07-28 one: the deploy example's bare rmcp service over HTTP, whose handler asks its
own questions as `input_required` results):
the upstream adapter turns each server's own `elicitation/create` / `sampling/createMessage`
into an `input_required` round, `ElicitationLayer` seals the state, validates accepted answers
(asking again with a hint) and asks its `--gate` approvals.

Every call goes through the client's own multi round-trip loop (`Client.call_tool` with
`elicitation_callback` / `sampling_callback`); `context.request_id` in a callback is the
input request's key (`elicitation-1`, `sampling-1`, `approval`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import Front, post_json, rpc
from mcp import Client, MCPError, types
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio

TEST_TIMEOUT_S = 60.0
READ_TIMEOUT_S = 30.0
HINT_PREFIX = "\n\n"
EVERYTHING_ELICIT = "trigger-elicitation-request"
EVERYTHING_SAMPLE = "trigger-sampling-request"
EVERYTHING_QUESTION = "Please provide inputs for the following fields:"
GATE_REFUSAL = "The request was not approved."


@dataclass
class Round:
    key: str | int
    message: str
    schema: dict[str, Any]


@dataclass
class User:
    """The elicitation callback: answers round N with `answers[N]`, records every round."""

    answers: list[types.ElicitResult]
    rounds: list[Round] = field(default_factory=list)

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestFormParams), params
        schema = json.loads(json.dumps(params.requested_schema, default=lambda o: o.model_dump(by_alias=True, exclude_none=True)))
        self.rounds.append(Round(context.request_id, params.message, schema))
        if len(self.rounds) > len(self.answers):
            return types.ErrorData(code=-1, message=f"unexpected round {len(self.rounds)}: {params.message!r}")
        return self.answers[len(self.rounds) - 1]


@dataclass
class Model:
    """The sampling callback: answers with `text` as `test-model`, records what was asked."""

    text: str
    asked: list[tuple[str | int, types.CreateMessageRequestParams]] = field(default_factory=list)

    async def __call__(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.asked.append((context.request_id, params))
        return types.CreateMessageResult(
            role="assistant", model="test-model", content=types.TextContent(type="text", text=self.text)
        )


def accept(**content: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content=content)


async def call_outcome(
    front: Front, tool: str, arguments: dict[str, Any], user: User | None = None, model: Model | None = None
) -> types.CallToolResult | MCPError:
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with httpx2.AsyncClient(timeout=READ_TIMEOUT_S) as http:
            async with Client(
                streamable_http_client(front.url, http_client=http),
                mode="2026-07-28",
                elicitation_callback=user,
                sampling_callback=model,
                read_timeout_seconds=READ_TIMEOUT_S,
            ) as client:
                try:
                    return await client.call_tool(tool, arguments)
                except MCPError as error:
                    return error


async def call(
    front: Front, tool: str, arguments: dict[str, Any], user: User | None = None, model: Model | None = None
) -> types.CallToolResult:
    outcome = await call_outcome(front, tool, arguments, user, model)
    if isinstance(outcome, MCPError):
        pytest.fail(f"{tool} failed with JSON-RPC error {outcome.code}: {outcome.message} {outcome.data!r}")
    return outcome


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


def changed_descriptions(first: dict[str, Any], again: dict[str, Any]) -> dict[str, str]:
    """The fields whose `description` the re-ask changed (where the layer puts its hint)."""
    return {
        name: prop.get("description", "")
        for name, prop in again["properties"].items()
        if prop.get("description") != first["properties"].get(name, {}).get("description")
    }


# --- server-filesystem (stdio), write_file gated -------------------------------------


async def test_filesystem_lists_tools_with_the_client(filesystem: Front) -> None:
    """mcp 2.3.0 validates the 2026-07-28 list result (its `ttlMs` and `cacheScope` too)."""
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with Client(filesystem.url, mode="2026-07-28", read_timeout_seconds=READ_TIMEOUT_S) as client:
            listed = await client.list_tools()
    names = {tool.name for tool in listed.tools}
    assert {"read_text_file", "write_file", "list_directory"} <= names, names


def test_filesystem_lists_tools_on_the_wire(filesystem: Front) -> None:
    """The same listing over raw HTTP: the tools are all there."""
    reply = post_json(filesystem.url, rpc("tools/list", {}, id_=1))
    result = reply["result"]
    assert result["resultType"] == "complete"
    names = {tool["name"] for tool in result["tools"]}
    assert {"read_text_file", "write_file", "list_directory"} <= names, names


async def test_filesystem_reads_a_file(filesystem: Front, fs_dir: Path) -> None:
    path = fs_dir / "read-me.txt"
    path.write_text("read through the stack\n")
    result = await call(filesystem, "read_text_file", {"path": str(path)})
    assert not result.is_error, text_of(result)
    assert text_of(result) == "read through the stack\n"


async def test_filesystem_write_approved_is_written(filesystem: Front, fs_dir: Path) -> None:
    path = fs_dir / "approved.txt"
    user = User([accept(approve=True)])
    result = await call(filesystem, "write_file", {"path": str(path), "content": "approved\n"}, user)
    assert not result.is_error, text_of(result)
    assert "Successfully wrote" in text_of(result)
    assert path.read_text() == "approved\n"
    (asked,) = user.rounds
    assert asked.key == "approval"
    assert "write_file" in asked.message, asked.message
    assert asked.schema["properties"]["approve"]["type"] == "boolean"
    assert asked.schema["required"] == ["approve"]


@pytest.mark.parametrize(
    "answer",
    [types.ElicitResult(action="decline"), types.ElicitResult(action="cancel"), accept(approve=False)],
    ids=["decline", "cancel", "approve-false"],
)
async def test_filesystem_write_refused_is_not_written(
    filesystem: Front, fs_dir: Path, answer: types.ElicitResult
) -> None:
    path = fs_dir / f"refused-{answer.action}-{bool(answer.content)}.txt"
    user = User([answer])
    result = await call(filesystem, "write_file", {"path": str(path), "content": "nope\n"}, user)
    assert result.is_error is True
    assert text_of(result) == GATE_REFUSAL
    assert not path.exists()
    assert len(user.rounds) == 1


# --- server-everything (stdio and Streamable HTTP) -------------------------------------


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("server/discover", {}),
        ("tools/list", {}),
        ("prompts/list", {}),
        ("resources/list", {}),
        ("resources/templates/list", {}),
        ("resources/read", {"uri": "demo://resource/static/document/architecture.md"}),
    ],
)
def test_everything_cacheable_results_carry_ttl_and_scope(everything: Front, method: str, params: dict) -> None:
    reply = post_json(everything.url, rpc(method, params, id_=1))
    assert "result" in reply, reply
    result = reply["result"]
    assert result["resultType"] == "complete"
    assert isinstance(result.get("ttlMs"), int) and result["ttlMs"] >= 0, sorted(result)
    assert result.get("cacheScope") in ("public", "private"), sorted(result)



async def test_everything_elicitation_accepted(everything: Front) -> None:
    user = User([accept(name="Ada Lovelace", check=True, email="ada@example.org")])
    result = await call(everything, EVERYTHING_ELICIT, {}, user)
    assert not result.is_error, text_of(result)
    text = text_of(result)
    assert "User provided the requested information" in text, text
    assert "- Name: Ada Lovelace" in text and "- Email: ada@example.org" in text, text
    assert "- Agreed to terms: true" in text, text
    (asked,) = user.rounds
    assert asked.key == "elicitation-1"
    assert asked.message == EVERYTHING_QUESTION
    assert asked.schema["required"] == ["name"]


async def test_everything_elicitation_not_matching_the_schema_is_asked_again(everything: Front) -> None:
    # `name` missing and `email` not an email: the layer asks again, the server never sees it.
    user = User([accept(email="not an email"), accept(name="Grace", email="grace@example.org")])
    result = await call(everything, EVERYTHING_ELICIT, {}, user)
    assert not result.is_error, text_of(result)
    assert "- Name: Grace" in text_of(result), text_of(result)
    first, again = user.rounds
    assert again.key == first.key == "elicitation-1"
    assert first.message == EVERYTHING_QUESTION
    assert again.message.startswith(EVERYTHING_QUESTION + HINT_PREFIX), again.message
    assert len(again.message) > len(EVERYTHING_QUESTION + HINT_PREFIX)
    hinted = changed_descriptions(first.schema, again.schema)
    assert hinted, f"no field carries a hint: {again.schema}"
    for name, description in hinted.items():
        original = first.schema["properties"][name].get("description", "")
        assert description.endswith(original), (name, description)


@pytest.mark.parametrize(("action", "said"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_everything_elicitation_declined_or_cancelled(everything: Front, action: str, said: str) -> None:
    user = User([types.ElicitResult(action=action)])
    result = await call(everything, EVERYTHING_ELICIT, {}, user)
    assert said in text_of(result), text_of(result)
    assert len(user.rounds) == 1


async def test_everything_sampling_answered(everything: Front) -> None:
    model = Model("hello from the 2.3 client")
    result = await call(everything, EVERYTHING_SAMPLE, {"prompt": "hi"}, User([]), model)
    assert not result.is_error, text_of(result)
    text = text_of(result)
    assert "hello from the 2.3 client" in text and "test-model" in text, text
    ((key, params),) = model.asked
    assert isinstance(key, str) and key.startswith("sampling-"), key
    assert params.max_tokens == 100
    assert "hi" in params.messages[0].content.text


async def test_everything_sampling_without_the_capability_is_refused(everything: Front) -> None:
    error = await call_outcome(everything, EVERYTHING_SAMPLE, {"prompt": "hi"}, User([]))
    assert isinstance(error, MCPError), error
    assert error.code == -32021
    assert "sampling" in (error.data or {}).get("requiredCapabilities", {}), error.data


async def test_everything_a_call_right_after_the_handshake_is_not_asked_the_servers_own_roots(
    fresh_everything_stdio: Front,
) -> None:
    # Within 350 ms of the handshake (Front returns once tools/list answered), a call that runs
    # 2 s and asks nothing itself.
    outcome = await call_outcome(fresh_everything_stdio, "trigger-long-running-operation", {"duration": 2, "steps": 2})
    assert not isinstance(outcome, MCPError), f"{outcome.code}: {outcome.message} {outcome.data}"
    assert "Long running operation" in text_of(outcome) and "completed" in text_of(outcome), text_of(outcome)


# --- tests/upstream/elicit_server.py (FastMCP, stdio) ----------------------------------


async def test_fastmcp_book_accepted(fastmcp: Front) -> None:
    user = User([accept(seats=3)])
    result = await call(fastmcp, "book", {"restaurant": "Chez Rust"}, user)
    assert not result.is_error, text_of(result)
    assert text_of(result) == "booked 3 at Chez Rust"
    (asked,) = user.rounds
    assert asked.key == "elicitation-1"
    assert asked.message == "How many seats at Chez Rust?"
    assert asked.schema["properties"]["seats"]["maximum"] == 8


async def test_fastmcp_book_too_many_seats_is_asked_again(fastmcp: Front) -> None:
    user = User([accept(seats=20), accept(seats=4)])
    result = await call(fastmcp, "book", {"restaurant": "Bistro"}, user)
    assert not result.is_error, text_of(result)
    assert text_of(result) == "booked 4 at Bistro"
    first, again = user.rounds
    assert again.key == first.key == "elicitation-1"
    assert again.message.startswith(first.message + HINT_PREFIX), again.message
    hinted = changed_descriptions(first.schema, again.schema)
    assert list(hinted) == ["seats"], again.schema
    assert hinted["seats"].endswith("How many seats"), hinted


async def test_fastmcp_book_declined(fastmcp: Front) -> None:
    user = User([types.ElicitResult(action="decline")])
    result = await call(fastmcp, "book", {"restaurant": "Nowhere"}, user)
    assert text_of(result) == "not booked: decline"
    assert len(user.rounds) == 1


# --- upstream-rmcp (rmcp 3.11, 2025-era, stdio) -----------------------------------------

RMCP_QUESTION = "How many seats?"


async def test_rmcp_stdio_plain_tool(rmcp_stdio: Front) -> None:
    result = await call(rmcp_stdio, "echo", {"text": "hello rmcp"})
    assert not result.is_error, text_of(result)
    assert text_of(result) == "hello rmcp"


async def test_rmcp_stdio_book_accepted(rmcp_stdio: Front) -> None:
    user = User([accept(seats=4)])
    result = await call(rmcp_stdio, "book", {"restaurant": "Chez Rust"}, user)
    assert not result.is_error, text_of(result)
    assert text_of(result) == "booked 4 at Chez Rust"
    (asked,) = user.rounds
    assert asked.key == "elicitation-1"
    assert asked.message == RMCP_QUESTION
    seats = asked.schema["properties"]["seats"]
    assert (seats["type"], seats["minimum"], seats["maximum"]) == ("integer", 1, 8), seats
    assert asked.schema["required"] == ["seats"]


async def test_rmcp_stdio_book_outside_the_schema_is_asked_again(rmcp_stdio: Front) -> None:
    # 12 > 8: the layer asks again with a hint; the server (which would say `out of range`)
    # never sees it.
    user = User([accept(seats=12), accept(seats=3)])
    result = await call(rmcp_stdio, "book", {"restaurant": "Bistro"}, user)
    assert not result.is_error, text_of(result)
    assert text_of(result) == "booked 3 at Bistro"
    first, again = user.rounds
    assert again.key == first.key == "elicitation-1"
    assert first.message == RMCP_QUESTION
    assert again.message.startswith(RMCP_QUESTION + HINT_PREFIX), again.message
    assert len(again.message) > len(RMCP_QUESTION + HINT_PREFIX)
    assert list(changed_descriptions(first.schema, again.schema)) == ["seats"], again.schema


@pytest.mark.parametrize(("action", "said"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_rmcp_stdio_book_declined_or_cancelled(rmcp_stdio: Front, action: str, said: str) -> None:
    user = User([types.ElicitResult(action=action)])
    result = await call(rmcp_stdio, "book", {"restaurant": "Nowhere"}, user)
    assert text_of(result) == said
    assert len(user.rounds) == 1


# --- the deploy example's bare rmcp service (2026-07-28, HTTP), no gate ------------------

DEPLOY_KEY = "deployment-approval"
DEPLOY_QUESTION = "Deploy to 'staging'?"
NOT_APPROVED = "Deployment was not approved."


async def test_deploy_http_lists_its_tools(deploy_http: Front) -> None:
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with Client(deploy_http.url, mode="2026-07-28", read_timeout_seconds=READ_TIMEOUT_S) as client:
            listed = await client.list_tools()
    names = {tool.name for tool in listed.tools}
    assert {"deploy", "list_branches", "delete_branch", "connect_github"} <= names, names


async def test_deploy_http_approved_after_the_layer_asks_again(deploy_http: Front) -> None:
    # "yes" is no boolean: the layer asks the handler's question again; `true` deploys.
    user = User([accept(approve="yes"), accept(approve=True)])
    result = await call(deploy_http, "deploy", {"environment": "staging"}, user)
    assert not result.is_error, text_of(result)
    assert result.structured_content == {"environment": "staging", "deployed": True}, result
    first, again = user.rounds
    assert again.key == first.key == DEPLOY_KEY
    assert first.message == DEPLOY_QUESTION
    assert first.schema["properties"]["approve"]["type"] == "boolean"
    assert first.schema["required"] == ["approve"]
    assert again.message.startswith(DEPLOY_QUESTION + HINT_PREFIX), again.message
    assert list(changed_descriptions(first.schema, again.schema)) == ["approve"], again.schema


@pytest.mark.parametrize(
    "answer",
    [types.ElicitResult(action="decline"), types.ElicitResult(action="cancel"), accept(approve=False)],
    ids=["decline", "cancel", "approve-false"],
)
async def test_deploy_http_refused_is_not_deployed(deploy_http: Front, answer: types.ElicitResult) -> None:
    user = User([answer])
    result = await call(deploy_http, "deploy", {"environment": "staging"}, user)
    assert result.is_error is True, result
    assert text_of(result) == NOT_APPROVED
    assert len(user.rounds) == 1
