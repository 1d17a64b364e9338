"""Interop tests: the Python `mcp==2.3.0` client against the `deploy` example server.

The server (`cargo run --example deploy`, behind `ElicitationLayer`) must already be
running; its endpoint is read from the `MCP_INTEROP_URL` environment variable, e.g.
`http://127.0.0.1:3000/mcp`. `scripts/interop.sh` builds and starts it, then runs this file.

Every test drives the client's own multi round-trip loop: `Client(url, mode="2026-07-28",
elicitation_callback=cb).call_tool(...)` resolves each `input_required` result by calling
`cb` once per embedded elicitation and retrying with `inputResponses` + the echoed
`requestState`, until a terminal result (or an error) comes back.

Notes on the client (read from mcp 2.3.0's source, mcp/client/_input_required.py and
mcp/client/session.py):

- In the 2026-07-28 loop the callback's return value is forwarded as it is: the client does
  NOT validate it against `requestedSchema` and does not coerce it. `ElicitResult.content` is
  typed `dict[str, str | int | float | bool | list[str] | None]`, so an invalid answer such as
  `{"approve": "yes"}` is a well-typed `ElicitResult` and reaches the server verbatim
  (`test_invalid_answer_is_sent_verbatim` checks the wire).
- A JSON-RPC error (e.g. -32602 for a bad `requestState`) is raised as `mcp.MCPError` and
  ends the loop; a tool error is a normal `CallToolResult` with `is_error=True`.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError, types
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio

APPROVAL_KEY = "deployment-approval"
NOT_APPROVED = "Deployment was not approved."
HINT_PREFIX = "\n\n"
EXPECTED_SCHEMA = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve", "description": "Tick to deploy the current build."},
        "note": {
            "type": "string",
            "maxLength": 200,
            "title": "Note",
            "description": "Optional: why, for the deployment log (at most 200 characters).",
        },
    },
    "required": ["approve"],
}
# Per-test wall-clock bound, so a hung server fails the test instead of the run.
TEST_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 15.0


def accept(**content: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content=content)


@dataclass
class Round:
    """One call of the elicitation callback, as the client handed it over."""

    key: str | int
    mode: str | None
    message: str
    requested_schema: dict[str, Any]


@dataclass
class ScriptedUser:
    """Elicitation callback that answers round N with `answers[N]` and records every round."""

    answers: list[types.ElicitResult]
    rounds: list[Round] = field(default_factory=list)

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestFormParams), f"expected a form elicitation, got {params!r}"
        self.rounds.append(
            Round(
                key=context.request_id,
                mode=params.mode,
                message=params.message,
                requested_schema=dict(params.requested_schema),
            )
        )
        if len(self.rounds) > len(self.answers):
            # More rounds than scripted: refuse, which makes the client raise MCPError
            # instead of looping up to its 10-round cap.
            return types.ErrorData(code=-1, message=f"unexpected elicitation round {len(self.rounds)}")
        return self.answers[len(self.rounds) - 1]


async def call_deploy_outcome(
    server: str | Any, user: ScriptedUser | None, environment: str = "staging", **kwargs: Any
) -> types.CallToolResult | MCPError:
    """`deploy` through the client's auto-retry loop: the result, or the JSON-RPC error.

    The error is caught INSIDE `async with Client(...)`: an exception that leaves the block
    comes out of the client's task group wrapped in (nested) `ExceptionGroup`s.
    """
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with Client(
            server,
            mode="2026-07-28",
            elicitation_callback=user,
            read_timeout_seconds=READ_TIMEOUT_S,
        ) as client:
            try:
                return await client.call_tool("deploy", {"environment": environment}, **kwargs)
            except MCPError as error:
                return error


async def call_deploy(
    server: str | Any, user: ScriptedUser | None, environment: str = "staging", **kwargs: Any
) -> types.CallToolResult:
    outcome = await call_deploy_outcome(server, user, environment, **kwargs)
    if isinstance(outcome, MCPError):
        pytest.fail(f"deploy failed with JSON-RPC error {outcome.code}: {outcome.message} {outcome.data!r}")
    return outcome


async def call_deploy_error(
    server: str | Any, user: ScriptedUser | None, environment: str = "staging", **kwargs: Any
) -> MCPError:
    outcome = await call_deploy_outcome(server, user, environment, **kwargs)
    if not isinstance(outcome, MCPError):
        pytest.fail(f"expected a JSON-RPC error, got a result: {outcome!r}")
    return outcome


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def assert_first_round(rnd: Round, environment: str = "staging") -> None:
    assert rnd.key == APPROVAL_KEY
    assert rnd.mode in (None, "form")
    assert rnd.message == f"Deploy to '{environment}'?"
    assert rnd.requested_schema == EXPECTED_SCHEMA


def assert_reask(
    rnd: Round, field_title: str, environment: str = "staging", prefilled: dict[str, Any] | None = None
) -> None:
    """The layer's re-ask: same key and form but for the valid fields pre-filled as `default`s
    and the problem on the wrong field (a sentence before its own description); message =
    original + a blank line + a line naming the field by its title."""
    assert rnd.key == APPROVAL_KEY
    schema = json.loads(json.dumps(rnd.requested_schema))
    defaults = {name: prop.pop("default") for name, prop in schema["properties"].items() if "default" in prop}
    assert defaults == (prefilled or {})
    (key,) = [name for name, prop in EXPECTED_SCHEMA["properties"].items() if prop["title"] == field_title]
    own = EXPECTED_SCHEMA["properties"][key]["description"]
    shown = schema["properties"][key]["description"]
    assert shown.endswith(". " + own), shown
    schema["properties"][key]["description"] = own
    assert schema == EXPECTED_SCHEMA
    original = f"Deploy to '{environment}'?"
    assert rnd.message == f"{original}{HINT_PREFIX}Please correct: {field_title}.", rnd.message


def assert_deployed(result: types.CallToolResult, environment: str) -> None:
    assert not result.is_error, text_of(result)
    assert result.structured_content == {"environment": environment, "deployed": True}


def assert_not_approved(result: types.CallToolResult) -> None:
    assert result.is_error is True
    assert text_of(result) == NOT_APPROVED
    assert not result.structured_content


# ---------------------------------------------------------------------------------------
# The cases of the issue
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("environment", ["staging", "production"])
async def test_accept_deploys(url: str, environment: str) -> None:
    user = ScriptedUser([accept(approve=True)])
    result = await call_deploy(url, user, environment)
    assert_deployed(result, environment)
    assert len(user.rounds) == 1
    assert_first_round(user.rounds[0], environment)


async def test_wrong_type_is_reasked_with_hint(url: str) -> None:
    user = ScriptedUser([accept(approve="yes"), accept(approve=True)])
    result = await call_deploy(url, user)
    assert len(user.rounds) == 2, [r.message for r in user.rounds]
    assert_first_round(user.rounds[0])
    assert_reask(user.rounds[1], "Approve")
    assert_deployed(result, "staging")


async def test_too_long_note_is_reasked_with_hint(url: str) -> None:
    user = ScriptedUser([accept(approve=True, note="n" * 300), accept(approve=True, note="n" * 200)])
    result = await call_deploy(url, user)
    assert len(user.rounds) == 2, [r.message for r in user.rounds]
    assert_first_round(user.rounds[0])
    assert_reask(user.rounds[1], "Note", prefilled={"approve": True})
    assert_deployed(result, "staging")


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_decline_or_cancel_is_not_approved(url: str, action: str) -> None:
    user = ScriptedUser([types.ElicitResult(action=action)])
    result = await call_deploy(url, user)
    assert_not_approved(result)
    assert len(user.rounds) == 1
    assert_first_round(user.rounds[0])


# ---------------------------------------------------------------------------------------
# Further interop checks
# ---------------------------------------------------------------------------------------


async def test_approve_false_is_not_approved(url: str) -> None:
    user = ScriptedUser([accept(approve=False, note="not today")])
    result = await call_deploy(url, user)
    assert_not_approved(result)
    assert len(user.rounds) == 1


async def test_two_invalid_answers_then_valid(url: str) -> None:
    """Each invalid answer gets its own re-ask; the hint names the field of THAT answer."""
    user = ScriptedUser([accept(approve="yes"), accept(approve=True, note="n" * 201), accept(approve=True)])
    result = await call_deploy(url, user)
    assert len(user.rounds) == 3, [r.message for r in user.rounds]
    assert_reask(user.rounds[1], "Approve")
    assert_reask(user.rounds[2], "Note", prefilled={"approve": True})
    assert "Approve:" not in user.rounds[2].message
    assert_deployed(result, "staging")


async def test_tampered_request_state_is_rejected(url: str) -> None:
    """A forged `requestState` seeded into the first call is a -32602 error, never a deploy."""
    user = ScriptedUser([accept(approve=True)])
    error = await call_deploy_error(
        url,
        user,
        input_responses={APPROVAL_KEY: accept(approve=True)},
        request_state="v1.kid.eyJ2IjoxfQ.AAAA",
    )
    assert error.code == -32602
    assert user.rounds == []


async def test_without_elicitation_capability(url: str) -> None:
    """No `elicitation_callback` means no `elicitation` capability: -32021 naming it."""
    error = await call_deploy_error(url, None)
    assert error.code == -32021
    required = (error.data or {}).get("requiredCapabilities")
    assert isinstance(required, dict) and "elicitation" in required, error.data


@dataclass
class WireLog:
    """Request and response bodies of every POST, captured by httpx2 event hooks."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    responses: list[str] = field(default_factory=list)

    def client(self) -> httpx2.AsyncClient:
        async def on_request(request: httpx2.Request) -> None:
            if request.method == "POST":
                self.requests.append(json.loads(request.content))
                self.headers.append({k.lower(): v for k, v in request.headers.items()})

        async def on_response(response: httpx2.Response) -> None:
            if response.request.method == "POST":
                await response.aread()
                self.responses.append(response.text)

        return httpx2.AsyncClient(
            timeout=READ_TIMEOUT_S, event_hooks={"request": [on_request], "response": [on_response]}
        )

    def tool_calls(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("method") == "tools/call"]


async def test_invalid_answer_is_sent_verbatim(url: str) -> None:
    """On the wire: the invalid answer goes out as-is, each retry has a fresh id, the same
    name/arguments and the `requestState` of the previous response, byte for byte."""
    wire = WireLog()
    user = ScriptedUser([accept(approve="yes"), accept(approve=True)])
    async with wire.client() as http:
        result = await call_deploy(streamable_http_client(url, http_client=http), user)
    assert_deployed(result, "staging")

    calls = wire.tool_calls()
    assert len(calls) == 3, calls
    assert len({c["id"] for c in calls}) == 3
    for call in calls:
        assert call["params"]["name"] == "deploy"
        assert call["params"]["arguments"] == {"environment": "staging"}
        assert call["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert "elicitation" in call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert "inputResponses" not in calls[0]["params"] and "requestState" not in calls[0]["params"]
    assert calls[1]["params"]["inputResponses"] == {APPROVAL_KEY: {"action": "accept", "content": {"approve": "yes"}}}
    assert calls[2]["params"]["inputResponses"] == {APPROVAL_KEY: {"action": "accept", "content": {"approve": True}}}

    # Each retry echoes the state of the input_required answer to the call before it.
    call_indexes = [i for i, r in enumerate(wire.requests) if r.get("method") == "tools/call"]
    for previous, retry in itertools.pairwise(call_indexes):
        state = _result_of(wire.responses[previous])["requestState"]
        assert isinstance(state, str) and state
        assert wire.requests[retry]["params"]["requestState"] == state

    for headers, request in zip(wire.headers, wire.requests):
        assert headers.get("mcp-protocol-version") == "2026-07-28"
        assert headers.get("mcp-method") == request["method"]
        if request["method"] == "tools/call":
            assert headers.get("mcp-name") == "deploy"
        assert "mcp-session-id" not in headers


def _result_of(body: str) -> dict[str, Any]:
    """The JSON-RPC `result` of a response body, `application/json` or one-event SSE."""
    text = body.strip()
    if not text.startswith("{"):
        data = [line[len("data:") :].strip() for line in text.splitlines() if line.startswith("data:")]
        text = next(d for d in data if d.startswith("{"))
    message = json.loads(text)
    assert "result" in message, message
    return message["result"]
