#!/usr/bin/env python3
"""A small MCP server of notes, on stdio, the standard library only (Python 3.11).

It speaks MCP 2025-06-18: newline-delimited JSON-RPC on stdin and stdout, `initialize`, then
`tools/list`, `tools/call`, `resources/list`, `resources/read` and `ping`. Two tools,
`add_note` (a `text`) and `list_notes`, and one resource, `notes://all`, every note. The notes
live in this process only: a restart forgets them.

    python3 examples/proxy/notes_server.py
    python3 examples/proxy/notes_server.py --page-size 1   # tools/list one tool a page
    python3 examples/proxy/notes_server.py --announce-changes
        # declares tools.listChanged, and sends notifications/tools/list_changed after each
        # add_note (as a server whose tools follow its data would)

examples/proxy/team.toml puts it behind elicitation-proxy beside server-filesystem, and the
proxy's tests (proxy/tests/upstreams.rs) run it as one of two upstreams.
"""

import json
import sys

PROTOCOL = "2025-06-18"

TOOLS = [
    {
        "name": "add_note",
        "description": "Add a note.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The note."}},
            "required": ["text"],
        },
    },
    {
        "name": "list_notes",
        "description": "Every note, one a line.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]

RESOURCE = {"uri": "notes://all", "name": "notes", "mimeType": "text/plain"}

notes = []

# `--announce-changes`: tools.listChanged declared, and a list change sent after each note.
ANNOUNCE = "--announce-changes" in sys.argv

# `--page-size N`: tools/list answers N tools a page, with a `nextCursor` (none: all at once).
PAGE_SIZE = int(sys.argv[sys.argv.index("--page-size") + 1]) if "--page-size" in sys.argv else None


def text(value):
    return {"content": [{"type": "text", "text": value}], "isError": False}


def handle(method, params):
    """The result of `method`, or raises KeyError (unknown method) / ValueError (bad params)."""
    if method == "initialize":
        return {
            "protocolVersion": PROTOCOL,
            "capabilities": {"tools": {"listChanged": ANNOUNCE}, "resources": {}},
            "serverInfo": {"name": "notes", "version": "1.0.0"},
            "instructions": "Notes: add_note adds one, list_notes reads them all.",
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        if PAGE_SIZE is None:
            return {"tools": TOOLS}
        start = int(params.get("cursor") or 0)
        page = {"tools": TOOLS[start : start + PAGE_SIZE]}
        if start + PAGE_SIZE < len(TOOLS):
            page["nextCursor"] = str(start + PAGE_SIZE)
        return page
    if method == "tools/call":
        name = params.get("name")
        arguments = params.get("arguments") or {}
        if name == "add_note":
            note = arguments.get("text")
            if not isinstance(note, str):
                raise ValueError("add_note needs a `text` string")
            notes.append(note)
            return text(f"noted ({len(notes)} notes)")
        if name == "list_notes":
            return text("\n".join(notes))
        raise ValueError(f"Unknown tool: {name}")
    if method == "resources/list":
        return {"resources": [RESOURCE]}
    if method == "resources/read":
        if params.get("uri") != RESOURCE["uri"]:
            raise ValueError(f"Resource not found: {params.get('uri')}")
        return {
            "contents": [
                {"uri": RESOURCE["uri"], "mimeType": "text/plain", "text": "\n".join(notes)}
            ]
        }
    raise KeyError(method)


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            reply = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
            print(json.dumps(reply), flush=True)
            continue
        if not isinstance(message, dict) or "method" not in message:
            continue  # an answer to a request of ours (we send none), or not a request
        if "id" not in message:
            continue  # a notification: notifications/initialized, cancelled, …
        ident = message["id"]
        try:
            result = handle(message["method"], message.get("params") or {})
            reply = {"jsonrpc": "2.0", "id": ident, "result": result}
        except KeyError:
            error = {"code": -32601, "message": f"Method not found: {message['method']}"}
            reply = {"jsonrpc": "2.0", "id": ident, "error": error}
        except ValueError as why:
            reply = {"jsonrpc": "2.0", "id": ident, "error": {"code": -32602, "message": str(why)}}
        print(json.dumps(reply), flush=True)
        if ANNOUNCE and message["method"] == "tools/call" and "result" in reply:
            if (message.get("params") or {}).get("name") == "add_note":
                changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
                print(json.dumps(changed), flush=True)


if __name__ == "__main__":
    main()
