"""A minimal 2026-07-28 MCP server on stdio (Python standard library only) for tests/upstream.rs.

It answers `server/discover` (so the adapter passes its requests through as they are), and its
`ask` tool answers `input_required` with a state of its own until its question is answered. Its
results carry fields no SDK models (`x-extra`), which must reach the client whole.
"""

import json
import sys


def reply(message_id, result=None, error=None):
    message = {"jsonrpc": "2.0", "id": message_id}
    if error is not None:
        message["error"] = error
    else:
        message["result"] = result
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


QUESTION = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Go ahead?",
        "requestedSchema": {
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
        },
    },
}

for line in sys.stdin:
    if not line.strip():
        continue
    message = json.loads(line)
    if "id" not in message:
        continue
    method = message.get("method")
    params = message.get("params") or {}
    if method == "server/discover":
        reply(message["id"], {"resultType": "complete", "supportedVersions": ["2026-07-28"],
                              "capabilities": {"tools": {}}, "x-extra": {"kept": True}})
    elif method == "tools/call" and params.get("name") == "ask":
        answer = (params.get("inputResponses") or {}).get("q") or {}
        if answer.get("action") == "accept":
            text = "ok=%s state=%s" % (answer["content"]["ok"], params.get("requestState"))
            reply(message["id"], {"resultType": "complete",
                                  "content": [{"type": "text", "text": text}],
                                  "x-extra": {"kept": True}})
        else:
            reply(message["id"], {"resultType": "input_required",
                                  "inputRequests": {"q": QUESTION}, "requestState": "mine"})
    else:
        reply(message["id"], error={"code": -32601, "message": "Method not found"})
