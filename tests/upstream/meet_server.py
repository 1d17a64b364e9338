"""A 2025-era FastMCP server (Python `mcp` 1.x) over Streamable HTTP on 127.0.0.1:PORT at `/mcp`
(`meet_server.py PORT`), whose calls ask their question only once two of them are in flight.

tests/it/upstream_concurrency.rs fronts it with the upstream adapter: two `meet` calls must run
in the session at once (no floor between them) for either to ask, and each question comes on its
own call's event stream, so each answer must reach its own call. Its `outside` asks on the
standalone GET stream, which the adapter reads and where it refuses a question no call carries;
its `add_tool` says on that stream that its tools changed, which a 2026 `subscriptions/listen`
through the adapter hears.
"""

import sys

import anyio

from pydantic import BaseModel, Field

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.lowlevel.server import NotificationOptions
from mcp.shared.exceptions import McpError

mcp = FastMCP("meet-fixture")

in_flight = 0
together = anyio.Event()


class Seats(BaseModel):
    seats: int = Field(description="How many seats", ge=1, le=8)


@mcp.tool()
async def meet(ctx: Context, name: str) -> str:
    """Waits (up to 5 s) until two calls of it are in flight, then asks how many seats for
    `name`; says what it was answered, and whether it met the other call (`met`) or gave up
    waiting (`alone`)."""
    global in_flight
    in_flight += 1
    if in_flight >= 2:
        together.set()
    met = "alone"
    with anyio.move_on_after(5):
        await together.wait()
        met = "met"
    try:
        answer = await ctx.elicit(message=f"How many seats for {name}?", schema=Seats)
    finally:
        in_flight -= 1
    if answer.action == "accept":
        return f"{name}: {answer.data.seats} seats, {met}"
    return f"{name}: {answer.action}, {met}"


@mcp.tool()
async def outside(ctx: Context) -> str:
    """Asks a question related to no request, so on the session's standalone GET stream, where
    no call can carry it: says how the client answered (`refused <code>`), or `answered`."""
    try:
        await ctx.session.elicit(
            message="Outside any call?",
            requestedSchema={"type": "object", "properties": {}},
            related_request_id=None,
        )
    except McpError as error:
        return f"refused {error.error.code}"
    return "answered"


@mcp.tool()
async def add_tool(ctx: Context) -> str:
    """Adds the tool `added` and says so on the standalone stream (`tools/list_changed`)."""
    mcp.add_tool(lambda: "here", name="added", description="Added at run time")
    await ctx.session.send_tool_list_changed()
    return "added"


# FastMCP declares no `listChanged`; this server says that its tools change.
_options = mcp._mcp_server.create_initialization_options
mcp._mcp_server.create_initialization_options = lambda *args, **kwargs: _options(
    NotificationOptions(tools_changed=True)
)


if __name__ == "__main__":
    mcp.settings.host = "127.0.0.1"
    mcp.settings.port = int(sys.argv[1])
    mcp.run("streamable-http")
