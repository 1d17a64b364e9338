"""Adversarial cases through `front` in front of the FastMCP fixture (tests/upstream/elicit_server.py),
with the `mcp==2.3.0` client where it can, and raw HTTP (httpx2) where the SDK hides what is
needed (another caller's `Authorization`, a replayed body, many calls left parked).

front uses the adapter's defaults: at most 256 parked calls, 64 requests in flight, a parked
call waits 600 s, a request to the upstream 300 s.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import anyio
import httpx2
import pytest
from conftest import Front, parse_reply, rpc
from mcp import types
from mcp.client.streamable_http import streamable_http_client
from test_upstream import READ_TIMEOUT_S, TEST_TIMEOUT_S, User, accept, text_of

pytestmark = pytest.mark.anyio

CAPABILITIES = {"elicitation": {"form": {}}}
MAX_PARKED = 256  # the adapter's default (src/upstream/config.rs)
_ids = itertools.count(1)


async def post(
    http: httpx2.AsyncClient, front: Front, body: dict[str, Any], caller: str | None = "Bearer alice"
) -> dict[str, Any]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": body["method"],
    }
    if body["method"] == "tools/call":
        headers["Mcp-Name"] = body["params"]["name"]
    if caller is not None:
        headers["Authorization"] = caller
    response = await http.post(front.url, content=json.dumps(body), headers=headers)
    return parse_reply(response.text)


def tool_call(name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = rpc("tools/call", {"name": name, "arguments": arguments, **extra}, id_=next(_ids), capabilities=CAPABILITIES)
    return body


def question(reply: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    assert "result" in reply, reply
    result = reply["result"]
    assert result["resultType"] == "input_required", result
    ((key, request),) = result["inputRequests"].items()
    return key, request, result["requestState"]


def answered(name: str, arguments: dict[str, Any], key: str, state: str, answer: dict[str, Any]) -> dict[str, Any]:
    return tool_call(name, arguments, requestState=state, inputResponses={key: answer})


def texts(reply: dict[str, Any]) -> str:
    assert "result" in reply, reply
    assert reply["result"]["resultType"] == "complete", reply
    return "\n".join(block.get("text", "") for block in reply["result"]["content"])


def seats(n: int) -> dict[str, Any]:
    return {"action": "accept", "content": {"seats": n}}


async def test_another_callers_state_is_refused(fastmcp: Front) -> None:
    args = {"restaurant": "Bistro"}
    async with httpx2.AsyncClient(timeout=READ_TIMEOUT_S) as http:
        key, _, state = question(await post(http, fastmcp, tool_call("book", args)))
        retry = answered("book", args, key, state, seats(2))
        mallory = await post(http, fastmcp, retry, caller="Bearer mallory")
        assert mallory.get("error", {}).get("code") == -32602, mallory
        anonymous = await post(http, fastmcp, retry, caller=None)
        assert anonymous.get("error", {}).get("code") == -32602, anonymous
        # The rightful caller still can: the refused retries did not consume the call.
        done = await post(http, fastmcp, retry)
        assert texts(done) == "booked 2 at Bistro"


async def test_a_finished_calls_state_replayed_is_refused(fastmcp: Front) -> None:
    """The 2.3 client finishes a call; its last retry, replayed byte for byte, is refused."""
    sent: list[tuple[dict[str, str], bytes]] = []

    async def on_request(request: httpx2.Request) -> None:
        if request.method == "POST":
            sent.append((dict(request.headers), request.content))

    user = User([accept(seats=5)])
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with httpx2.AsyncClient(
            timeout=READ_TIMEOUT_S, event_hooks={"request": [on_request]}
        ) as http:
            from mcp import Client

            async with Client(
                streamable_http_client(fastmcp.url, http_client=http), mode="2026-07-28", elicitation_callback=user
            ) as client:
                result = await client.call_tool("book", {"restaurant": "Replay"})
    assert text_of(result) == "booked 5 at Replay"
    retries = [(h, b) for h, b in sent if json.loads(b).get("params", {}).get("requestState")]
    assert len(retries) == 1, [json.loads(b) for _, b in sent]
    headers, body = retries[0]
    async with httpx2.AsyncClient(timeout=READ_TIMEOUT_S) as http:
        response = await http.post(fastmcp.url, content=body, headers={
            k: v for k, v in headers.items() if k.lower() not in ("content-length", "host")
        })
        replay = parse_reply(response.text)
    error = replay.get("error")
    assert error and error["code"] == -32602, replay
    message = error["message"].lower()
    assert "no longer wait" in message or "requeststate" in message, error


async def test_a_flood_of_parked_calls_is_bounded_and_later_calls_work(fresh_fastmcp: Front) -> None:
    front = fresh_fastmcp
    limit = anyio.Semaphore(16)
    parked: list[tuple[int, str, str]] = []
    refused: list[dict[str, Any]] = []
    # Five callers, each under its fair share (a quarter of the bound), fill the bound together.
    callers = [f"Bearer flooder-{n}" for n in range(5)]

    def caller_of(n: int) -> str:
        return callers[n % len(callers)]

    async with httpx2.AsyncClient(timeout=READ_TIMEOUT_S, limits=httpx2.Limits(max_connections=16)) as http:

        async def park(n: int) -> None:
            async with limit:
                reply = await post(http, front, tool_call("book", {"restaurant": f"R{n}"}), caller_of(n))
            if "error" in reply:
                refused.append(reply)
            else:
                key, _, state = question(reply)
                parked.append((n, key, state))

        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for n in range(MAX_PARKED + 8):
                    group.start_soon(park, n)
        assert len(parked) == MAX_PARKED, (len(parked), refused[:2])
        assert len(refused) == 8
        for reply in refused:
            assert "Too many calls" in reply["error"]["message"], reply

        # Other calls still run while all of them wait...
        echoed = await post(http, front, tool_call("echo", {"text": "still served"}))
        assert texts(echoed) == "still served"
        # ...and a parked call still resumes; once it is done, a new call parks again.
        n, key, state = parked[0]
        answer = answered("book", {"restaurant": f"R{n}"}, key, state, seats(1))
        done = await post(http, front, answer, caller_of(n))
        assert texts(done) == f"booked 1 at R{n}"
        question(await post(http, front, tool_call("book", {"restaurant": "one more"}), caller_of(n)))


async def test_a_child_that_dies_mid_call_is_a_clear_error_and_the_next_call_works(fresh_fastmcp: Front) -> None:
    front = fresh_fastmcp
    async with httpx2.AsyncClient(timeout=READ_TIMEOUT_S) as http:
        # A call parked before the crash.
        args = {"restaurant": "Gone"}
        key, _, state = question(await post(http, front, tool_call("book", args)))

        crashed = await post(http, front, tool_call("crash", {}))
        error = crashed.get("error")
        assert error, crashed
        assert "exited" in error["message"], error

        echoed = await post(http, front, tool_call("echo", {"text": "after the crash"}))
        assert texts(echoed) == "after the crash"

        # The parked call went with the child: its retry is a clear -32602.
        retry = await post(http, front, answered("book", args, key, state, seats(1)))
        assert retry.get("error", {}).get("code") == -32602, retry
        assert "no longer wait" in retry["error"]["message"], retry

    # And the 2.3 client's own loop works against the restarted child.
    from test_upstream import call

    result = await call(front, "book", {"restaurant": "Reborn"}, User([accept(seats=2)]))
    assert text_of(result) == "booked 2 at Reborn"


async def test_an_upstream_call_that_never_answers_is_cancelled_when_its_client_gives_up(fresh_fastmcp: Front) -> None:
    """`hang` never answers. front keeps the adapter's 300 s request timeout (it has no flag for
    it), too long for a test: the timeout error itself is covered by tests/services/upstream.rs with a
    short timeout. What is checked here: while `hang` runs, requests other than the three that
    may be asked questions (here `tools/list`) are served; a `tools/call` waits its turn (the
    adapter runs one call at a time in a 2025-era session: src/upstream/mod.rs), so it is not
    asserted on; once the client gives up on `hang`, the adapter cancels it at the upstream
    and the next call runs at once."""
    front = fresh_fastmcp
    outcome: list[str] = []
    async with httpx2.AsyncClient(timeout=READ_TIMEOUT_S) as http:

        async def hang() -> None:
            try:
                await http.post(
                    front.url,
                    content=json.dumps(tool_call("hang", {})),
                    headers={
                        "Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream",
                        "MCP-Protocol-Version": "2026-07-28",
                        "Mcp-Method": "tools/call",
                        "Mcp-Name": "hang",
                    },
                    timeout=3.0,
                )
                outcome.append("answered")
            except httpx2.ReadTimeout:
                outcome.append("gave up")

        with anyio.fail_after(TEST_TIMEOUT_S):
            async with anyio.create_task_group() as group:
                group.start_soon(hang)
                await anyio.sleep(0.5)
                with anyio.fail_after(2):
                    listed = await post(http, front, rpc("tools/list", {}, id_=next(_ids)))
                assert "hang" in {tool["name"] for tool in listed["result"]["tools"]}
        assert outcome == ["gave up"]
        with anyio.fail_after(5):
            echoed = await post(http, front, tool_call("echo", {"text": "afterwards"}))
        assert texts(echoed) == "afterwards"
    assert "cancelled" in front.log(200), "the upstream was told the call is cancelled"


async def test_calls_refused_for_a_missing_capability_do_not_stay_parked(fresh_fastmcp: Front) -> None:
    front = fresh_fastmcp
    limit = anyio.Semaphore(16)
    codes: list[int | None] = []
    async with httpx2.AsyncClient(timeout=READ_TIMEOUT_S, limits=httpx2.Limits(max_connections=16)) as http:

        async def incapable(n: int) -> None:
            body = rpc("tools/call", {"name": "book", "arguments": {"restaurant": f"X{n}"}}, id_=next(_ids), capabilities={})
            async with limit:
                reply = await post(http, front, body)
            codes.append(reply.get("error", {}).get("code"))

        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for n in range(MAX_PARKED + 4):
                    group.start_soon(incapable, n)
        # Each is refused by the layer, as it should be...
        assert codes.count(-32021) >= MAX_PARKED, sorted(set(codes), key=str)
        # ...and a caller that can answer is still asked.
        reply = await post(http, front, tool_call("book", {"restaurant": "capable"}))
        question(reply)
