"""The Python `mcp==1.30.0` `ClientSession` (2025-11-25: `initialize`, a session, questions as
server-to-client requests) against real 2025-era servers behind `front`, through its legacy
bridge: upstream server → adapter (its requests become `input_required` rounds) →
`ElicitationLayer` (sealed state, validation, re-asks, `--gate` approvals) → bridge (each round
back into `elicitation/create` / `sampling/createMessage` on the POST's event stream) → this
client's callbacks. The client knows nothing of multi round-trip requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Front
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

pytestmark = pytest.mark.anyio

TEST_TIMEOUT_S = 60.0
HINT_PREFIX = "\n\n"
EVERYTHING_ELICIT = "trigger-elicitation-request"
EVERYTHING_SAMPLE = "trigger-sampling-request"
EVERYTHING_QUESTION = "Please provide inputs for the following fields:"
GATE_REFUSAL = "The request was not approved."


@dataclass
class Asked:
    message: str
    schema: dict[str, Any]


@dataclass
class User:
    """The elicitation callback: answers round N with `answers[N]`, records every question."""

    answers: list[types.ElicitResult]
    asked: list[Asked] = field(default_factory=list)

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestFormParams), params
        self.asked.append(Asked(params.message, dict(params.requestedSchema)))
        if len(self.asked) > len(self.answers):
            return types.ErrorData(code=-1, message=f"unexpected question {len(self.asked)}: {params.message!r}")
        return self.answers[len(self.asked) - 1]


@dataclass
class Model:
    """The sampling callback: answers with `text` as `test-model`."""

    text: str
    asked: list[types.CreateMessageRequestParams] = field(default_factory=list)

    async def __call__(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.asked.append(params)
        return types.CreateMessageResult(
            role="assistant", model="test-model", content=types.TextContent(type="text", text=self.text)
        )


def accept(**content: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content=content)


async def session_call(
    front: Front, tool: str | None, arguments: dict[str, Any], user: User | None = None, model: Model | None = None
) -> Any:
    """One session: `initialize`, then `tools/call` (or `tools/list` when `tool` is None); the
    result, or the `McpError` it raised."""
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with streamable_http_client(front.url) as (read, write, _):
            async with ClientSession(read, write, elicitation_callback=user, sampling_callback=model) as session:
                init = await session.initialize()
                assert init.protocolVersion == "2025-11-25"
                try:
                    if tool is None:
                        return await session.list_tools()
                    return await session.call_tool(tool, arguments)
                except McpError as error:
                    return error


async def call(
    front: Front, tool: str, arguments: dict[str, Any], user: User | None = None, model: Model | None = None
) -> types.CallToolResult:
    outcome = await session_call(front, tool, arguments, user, model)
    if isinstance(outcome, McpError):
        pytest.fail(f"{tool} failed with JSON-RPC error {outcome.error.code}: {outcome.error.message}")
    return outcome


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


def changed_descriptions(first: dict[str, Any], again: dict[str, Any]) -> dict[str, str]:
    return {
        name: prop.get("description", "")
        for name, prop in again["properties"].items()
        if prop.get("description") != first["properties"].get(name, {}).get("description")
    }


# --- server-filesystem (stdio), write_file gated -------------------------------------


async def test_filesystem_lists_tools(filesystem: Front) -> None:
    listed = await session_call(filesystem, None, {})
    assert not isinstance(listed, McpError), listed
    names = {tool.name for tool in listed.tools}
    assert {"read_text_file", "write_file", "list_directory"} <= names, names


async def test_filesystem_reads_a_file(filesystem: Front, fs_dir: Path) -> None:
    path = fs_dir / "legacy-read-me.txt"
    path.write_text("read by a 2025 client\n")
    result = await call(filesystem, "read_text_file", {"path": str(path)})
    assert not result.isError, text_of(result)
    assert text_of(result) == "read by a 2025 client\n"


async def test_filesystem_write_approved_is_written(filesystem: Front, fs_dir: Path) -> None:
    path = fs_dir / "legacy-approved.txt"
    user = User([accept(approve=True)])
    result = await call(filesystem, "write_file", {"path": str(path), "content": "approved\n"}, user)
    assert not result.isError, text_of(result)
    assert "Successfully wrote" in text_of(result)
    assert path.read_text() == "approved\n"
    (asked,) = user.asked
    assert "write_file" in asked.message, asked.message
    assert asked.schema["properties"]["approve"]["type"] == "boolean"


@pytest.mark.parametrize(
    "answer",
    [types.ElicitResult(action="decline"), types.ElicitResult(action="cancel"), accept(approve=False)],
    ids=["decline", "cancel", "approve-false"],
)
async def test_filesystem_write_refused_is_not_written(
    filesystem: Front, fs_dir: Path, answer: types.ElicitResult
) -> None:
    path = fs_dir / f"legacy-refused-{answer.action}-{bool(answer.content)}.txt"
    user = User([answer])
    result = await call(filesystem, "write_file", {"path": str(path), "content": "nope\n"}, user)
    assert result.isError is True
    assert text_of(result) == GATE_REFUSAL
    assert not path.exists()
    assert len(user.asked) == 1


# --- server-everything (stdio and Streamable HTTP) -------------------------------------


async def test_everything_elicitation_accepted(everything: Front) -> None:
    user = User([accept(name="Ada Lovelace", check=True, email="ada@example.org")])
    result = await call(everything, EVERYTHING_ELICIT, {}, user)
    assert not result.isError, text_of(result)
    text = text_of(result)
    assert "- Name: Ada Lovelace" in text and "- Email: ada@example.org" in text, text
    assert "- Agreed to terms: true" in text, text
    (asked,) = user.asked
    assert asked.message == EVERYTHING_QUESTION
    assert asked.schema["required"] == ["name"]


async def test_everything_elicitation_not_matching_the_schema_is_asked_again(everything: Front) -> None:
    user = User([accept(email="not an email"), accept(name="Grace", email="grace@example.org")])
    result = await call(everything, EVERYTHING_ELICIT, {}, user)
    assert not result.isError, text_of(result)
    assert "- Name: Grace" in text_of(result), text_of(result)
    first, again = user.asked
    assert first.message == EVERYTHING_QUESTION
    assert again.message.startswith(EVERYTHING_QUESTION + HINT_PREFIX), again.message
    assert changed_descriptions(first.schema, again.schema), again.schema


@pytest.mark.parametrize(("action", "said"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_everything_elicitation_declined_or_cancelled(everything: Front, action: str, said: str) -> None:
    user = User([types.ElicitResult(action=action)])
    result = await call(everything, EVERYTHING_ELICIT, {}, user)
    assert said in text_of(result), text_of(result)
    assert len(user.asked) == 1


async def test_everything_sampling_answered(everything: Front) -> None:
    model = Model("hello from the 1.30 client")
    result = await call(everything, EVERYTHING_SAMPLE, {"prompt": "hi"}, User([]), model)
    assert not result.isError, text_of(result)
    text = text_of(result)
    assert "hello from the 1.30 client" in text and "test-model" in text, text
    (params,) = model.asked
    assert params.maxTokens == 100


# --- tests/upstream/elicit_server.py (FastMCP, stdio) ----------------------------------


async def test_fastmcp_book_accepted(fastmcp: Front) -> None:
    user = User([accept(seats=3)])
    result = await call(fastmcp, "book", {"restaurant": "Chez Legacy"}, user)
    assert not result.isError, text_of(result)
    assert text_of(result) == "booked 3 at Chez Legacy"
    (asked,) = user.asked
    assert asked.message == "How many seats at Chez Legacy?"


async def test_fastmcp_book_too_many_seats_is_asked_again(fastmcp: Front) -> None:
    user = User([accept(seats=20), accept(seats=4)])
    result = await call(fastmcp, "book", {"restaurant": "Bistro"}, user)
    assert not result.isError, text_of(result)
    assert text_of(result) == "booked 4 at Bistro"
    first, again = user.asked
    assert again.message.startswith(first.message + HINT_PREFIX), again.message
    assert list(changed_descriptions(first.schema, again.schema)) == ["seats"], again.schema


async def test_fastmcp_book_declined(fastmcp: Front) -> None:
    user = User([types.ElicitResult(action="decline")])
    result = await call(fastmcp, "book", {"restaurant": "Nowhere"}, user)
    assert text_of(result) == "not booked: decline"
    assert len(user.asked) == 1


# --- a child that dies (FastMCP fixture), through the bridge ---------------------------


def crash_through(front: Front) -> dict[str, Any]:
    """`crash` as a stateless 2026-07-28 call of another client: the child exits."""
    from conftest import post_json, rpc

    return post_json(front.url, rpc("tools/call", {"name": "crash", "arguments": {}}, id_=99))


async def test_a_child_that_dies_mid_call_is_a_clear_error_and_the_next_call_works(fresh_fastmcp: Front) -> None:
    crashed = await session_call(fresh_fastmcp, "crash", {})
    assert isinstance(crashed, McpError), crashed
    assert "exited" in crashed.error.message, crashed.error
    result = await call(fresh_fastmcp, "echo", {"text": "after the crash"})
    assert text_of(result) == "after the crash"


async def test_a_child_that_dies_while_the_user_answers_is_a_clear_error(fresh_fastmcp: Front) -> None:
    """The question is on the user's screen when the child exits: the answer finds no call."""

    @dataclass
    class CrashingUser(User):
        async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
            reply = await anyio.to_thread.run_sync(crash_through, fresh_fastmcp)
            assert "exited" in reply.get("error", {}).get("message", ""), reply
            return await super().__call__(context, params)

    user = CrashingUser([accept(seats=2)])
    outcome = await session_call(fresh_fastmcp, "book", {"restaurant": "Gone"}, user)
    assert len(user.asked) == 1
    if isinstance(outcome, McpError):
        message = outcome.error.message
    else:
        assert outcome.isError, text_of(outcome)
        message = text_of(outcome)
    assert "no longer waiting" in message, message
    result = await call(fresh_fastmcp, "book", {"restaurant": "Reborn"}, User([accept(seats=1)]))
    assert text_of(result) == "booked 1 at Reborn"


# --- upstream-rmcp (rmcp 3.11, 2025-era, stdio), through the bridge ----------------------

RMCP_QUESTION = "How many seats?"


async def test_rmcp_stdio_plain_tool(rmcp_stdio: Front) -> None:
    result = await call(rmcp_stdio, "echo", {"text": "hello rmcp"})
    assert not result.isError, text_of(result)
    assert text_of(result) == "hello rmcp"


async def test_rmcp_stdio_book_accepted(rmcp_stdio: Front) -> None:
    user = User([accept(seats=4)])
    result = await call(rmcp_stdio, "book", {"restaurant": "Chez Legacy"}, user)
    assert not result.isError, text_of(result)
    assert text_of(result) == "booked 4 at Chez Legacy"
    (asked,) = user.asked
    assert asked.message == RMCP_QUESTION
    seats = asked.schema["properties"]["seats"]
    assert (seats["type"], seats["minimum"], seats["maximum"]) == ("integer", 1, 8), seats


async def test_rmcp_stdio_book_outside_the_schema_is_asked_again(rmcp_stdio: Front) -> None:
    user = User([accept(seats=12), accept(seats=3)])
    result = await call(rmcp_stdio, "book", {"restaurant": "Bistro"}, user)
    assert not result.isError, text_of(result)
    assert text_of(result) == "booked 3 at Bistro"
    first, again = user.asked
    assert first.message == RMCP_QUESTION
    assert again.message.startswith(RMCP_QUESTION + HINT_PREFIX), again.message
    assert list(changed_descriptions(first.schema, again.schema)) == ["seats"], again.schema


@pytest.mark.parametrize(("action", "said"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_rmcp_stdio_book_declined_or_cancelled(rmcp_stdio: Front, action: str, said: str) -> None:
    user = User([types.ElicitResult(action=action)])
    result = await call(rmcp_stdio, "book", {"restaurant": "Nowhere"}, user)
    assert text_of(result) == said
    assert len(user.asked) == 1


# --- the deploy example's bare rmcp service (2026-07-28, HTTP), through the bridge -------

DEPLOY_QUESTION = "Deploy to 'staging'?"
NOT_APPROVED = "Deployment was not approved."


async def test_deploy_http_lists_its_tools(deploy_http: Front) -> None:
    listed = await session_call(deploy_http, None, {})
    assert not isinstance(listed, McpError), listed
    names = {tool.name for tool in listed.tools}
    assert {"deploy", "list_branches", "delete_branch", "connect_github"} <= names, names


async def test_deploy_http_approved_after_the_layer_asks_again(deploy_http: Front) -> None:
    user = User([accept(approve="yes"), accept(approve=True)])
    result = await call(deploy_http, "deploy", {"environment": "staging"}, user)
    assert not result.isError, text_of(result)
    assert result.structuredContent == {"environment": "staging", "deployed": True}, result
    first, again = user.asked
    assert first.message == DEPLOY_QUESTION
    assert first.schema["properties"]["approve"]["type"] == "boolean"
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
    assert result.isError is True, result
    assert text_of(result) == NOT_APPROVED
    assert len(user.asked) == 1
