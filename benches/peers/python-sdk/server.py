"""The `deploy` tool on the official Python SDK (`mcp` 2.3.0), served by uvicorn with one worker.

`MCPServer` installs the SDK's `RequestStateBoundary`: every `requestState` the tool returns is
sealed (AES-256-GCM, bound to method, tool, arguments digest, audience, 600 s) and every echo is
verified before the tool runs, so the tool sees only the plaintext it minted. The tool builds its
`InputRequiredResult` by hand, because the resolver API (`Resolve` + `Elicit`) answers an invalid
answer with a tool error instead of asking again; the answer is checked with a strict pydantic
model (a lax `bool` would take `"yes"` as true).

    PORT=3000 python server.py      # scripts/peers.sh runs it from .cache/peers/venv
"""

from __future__ import annotations

import json
import os
from typing import Literal

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    InputRequiredResult,
    TextContent,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

APPROVAL = "deployment-approval"
KEY = os.environ.get("PEER_KEY", "peers-sh-request-state-key-32-bytes!")


class Approval(BaseModel):
    """The form's content, checked strictly: `approve` must be a JSON boolean."""

    model_config = ConfigDict(strict=True, extra="ignore")
    approve: bool
    note: str | None = Field(default=None, max_length=200)


FORM = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve"},
        "note": {"type": "string", "maxLength": 200, "title": "Note"},
    },
    "required": ["approve"],
}

server = MCPServer(
    name="deploy-python-sdk",
    version="1.0.0",
    request_state_security=RequestStateSecurity(keys=[KEY]),
)


def ask(environment: str) -> InputRequiredResult:
    question = ElicitRequest(
        params=ElicitRequestFormParams(message=f"Deploy to {environment}?", requested_schema=FORM)
    )
    return InputRequiredResult(
        input_requests={APPROVAL: question},
        request_state=json.dumps({"environment": environment}),
    )


def refused() -> CallToolResult:
    return CallToolResult(content=[TextContent(text="Deployment was not approved.")], is_error=True)


@server.tool(description="Deploy the current build to an environment. Asks the user for approval first.")
async def deploy(
    environment: Literal["staging", "production"], ctx: Context
) -> CallToolResult | InputRequiredResult:
    answer = (ctx.input_responses or {}).get(APPROVAL)
    state = json.loads(ctx.request_state) if ctx.request_state else None
    if answer is None or getattr(answer, "action", None) is None or state != {"environment": environment}:
        return ask(environment)
    if answer.action != "accept":
        return refused()
    try:
        content = Approval.model_validate(answer.content or {})
    except ValidationError:
        return ask(environment)
    if not content.approve:
        return refused()
    result = {"environment": environment, "deployed": True}
    return CallToolResult(
        content=[TextContent(text=json.dumps(result))], structured_content=result
    )


app = server.streamable_http_app(stateless_http=True)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "3000")), workers=1, log_level="warning")
