"""A 2025-era FastMCP server (Python `mcp` 1.x) whose tool asks with `ctx.elicit(...)`.

On stdio by default; `--http PORT` serves it over Streamable HTTP on 127.0.0.1:PORT at `/mcp`
(a session per client, answers as event streams); `--https PORT CERT KEY` the same over TLS.

tests/upstream.rs starts it through the upstream adapter: its question comes back to the
2026-07-28 client as an `input_required` round, and the answer reaches `ctx.elicit` as the
response to its server-to-client request.
"""

import os

import anyio

from pydantic import BaseModel, Field

from mcp.server.fastmcp import Context, FastMCP

mcp = FastMCP("elicit-fixture")


class Booking(BaseModel):
    seats: int = Field(description="How many seats", ge=1, le=8)


@mcp.tool()
async def book(ctx: Context, restaurant: str) -> str:
    """Books a table, asking how many seats."""
    answer = await ctx.elicit(message=f"How many seats at {restaurant}?", schema=Booking)
    if answer.action == "accept":
        return f"booked {answer.data.seats} at {restaurant}"
    return f"not booked: {answer.action}"


@mcp.tool()
def crash() -> str:
    """Exits the process in the middle of the call (a server that dies mid-call)."""
    os._exit(3)


@mcp.tool()
async def hang() -> str:
    """Never answers (an upstream that hangs)."""
    await anyio.sleep_forever()
    return "unreachable"


@mcp.tool()
def pid() -> str:
    """The server's process id (to see that it is gone once the adapter is)."""
    return str(os.getpid())


@mcp.tool()
def echo(text: str) -> str:
    """Echoes the text."""
    return text


@mcp.tool()
async def header(ctx: Context, name: str, wait_ms: int = 0) -> str:
    """The value of one header of the HTTP request that carried the call (after `wait_ms`)."""
    await anyio.sleep(wait_ms / 1000)
    request = ctx.request_context.request
    if request is None:
        return "(not over HTTP)"
    return request.headers.get(name, "(absent)")


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 5 and sys.argv[1] == "--https":
        # Streamable HTTP over TLS: --https PORT CERT KEY (PEM files).
        import uvicorn

        port, cert, key = int(sys.argv[2]), sys.argv[3], sys.argv[4]
        uvicorn.run(mcp.streamable_http_app(), host="127.0.0.1", port=port,
                    ssl_certfile=cert, ssl_keyfile=key, log_level="warning")
    elif len(sys.argv) == 3 and sys.argv[1] == "--http":
        mcp.settings.host = "127.0.0.1"
        mcp.settings.port = int(sys.argv[2])
        mcp.run("streamable-http")
    else:
        mcp.run("stdio")
