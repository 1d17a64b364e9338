"""A desktop host, as Claude Desktop or VS Code runs a server: the Python `mcp` 1.30 client
(2025-11-25) launches `elicitation-proxy --stdio` and speaks MCP on its stdin/stdout, answering
the gate's `elicitation/create` through its elicitation callback.

    python host.py PROXY CONFIG DATA_DIR

Asserts, printing one line per check: a gated `write_file` is asked (the message names the
path), declined → refused and nothing written, approved → written; a read is not asked.
Exits non-zero on the first failed check.
"""

import sys
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

PROXY, CONFIG, DATA = sys.argv[1], sys.argv[2], Path(sys.argv[3])


async def main() -> None:
    asked: list[str] = []
    answers: list[types.ElicitResult] = []

    async def on_elicit(context, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return answers.pop(0)

    server = StdioServerParameters(
        command=PROXY, args=["--config", CONFIG, "--ephemeral-keys", "--stdio"]
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, elicitation_callback=on_elicit) as session:
            init = await session.initialize()
            print("initialized:", init.protocolVersion, init.serverInfo.name)
            tools = {t.name for t in (await session.list_tools()).tools}
            assert {"write_file", "read_text_file"} <= tools, tools

            target = DATA / "stdio.txt"
            args = {"path": str(target), "content": "from stdio"}

            answers.append(types.ElicitResult(action="decline"))
            declined = await session.call_tool("write_file", args)
            assert asked == [f'Write to "{target}"?'], asked
            assert declined.isError, declined
            assert not target.exists(), "written although declined"
            print("declined: asked", asked[-1], "-> refused, nothing written")

            answers.append(types.ElicitResult(action="accept", content={"approve": True}))
            approved = await session.call_tool("write_file", args)
            assert len(asked) == 2, asked
            assert not approved.isError, approved
            assert target.read_text() == "from stdio", target.read_text()
            print("approved: written")

            (DATA / "read.txt").write_text("read me")
            read = await session.call_tool("read_text_file", {"path": str(DATA / "read.txt")})
            assert not read.isError, read
            assert len(asked) == 2, f"a read was asked: {asked}"
            assert "read me" in str(read.content), read.content
            print("read: not asked")
    print("host.py: all checks passed")


anyio.run(main)
