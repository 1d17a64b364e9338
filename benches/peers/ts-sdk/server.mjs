// The `deploy` tool on the official TypeScript SDK (`@modelcontextprotocol/server` 2.4.0), as its
// own docs write it: the MRTR helpers (`inputRequired`, `inputResponse`, the schema-checking
// `acceptedContent`) and its request-state codec (`createRequestStateCodec`, verified by the
// server before the handler runs). Served by `createMcpHandler` (2026-07-28 only) through
// `@modelcontextprotocol/node`'s `toNodeHandler` on `node:http`, on 127.0.0.1:$PORT/mcp.
//
// Run by scripts/peers.sh, which installs the packages under .cache/peers/ts-sdk.
import http from "node:http";

import { toNodeHandler } from "@modelcontextprotocol/node";
import {
  McpServer,
  acceptedContent,
  createMcpHandler,
  createRequestStateCodec,
  inputRequired,
  inputResponse,
} from "@modelcontextprotocol/server";
import * as z from "zod";

const APPROVAL = "deployment-approval";
const approval = z.object({
  approve: z.boolean().describe("Approve"),
  note: z.string().max(200).optional().describe("Note"),
});
// HMAC-SHA256, 600 s; the key is the script's, 32 bytes.
const codec = createRequestStateCodec({
  key: process.env.PEER_KEY ?? "peers-sh-request-state-key-32-bytes!",
  ttlSeconds: 600,
});

function deployServer() {
  const server = new McpServer(
    { name: "deploy-ts-sdk", version: "1.0.0" },
    { requestState: { verify: codec.verify } },
  );
  server.registerTool(
    "deploy",
    {
      description: "Deploy the current build to an environment. Asks the user for approval first.",
      inputSchema: z.object({ environment: z.enum(["staging", "production"]) }),
    },
    async ({ environment }, ctx) => {
      const ask = async () =>
        inputRequired({
          inputRequests: {
            [APPROVAL]: inputRequired.elicit({
              message: `Deploy to ${environment}?`,
              requestedSchema: approval,
            }),
          },
          requestState: await codec.mint({ environment }, ctx),
        });
      const answer = inputResponse(ctx.mcpReq.inputResponses, APPROVAL);
      // The verified state: the answer counts only for the call it was asked for.
      const state = ctx.mcpReq.requestState();
      if (answer.kind === "missing" || state?.environment !== environment) {
        return ask();
      }
      if (answer.kind === "elicit" && answer.action !== "accept") {
        return { content: [{ type: "text", text: "Deployment was not approved." }], isError: true };
      }
      const content = acceptedContent(ctx.mcpReq.inputResponses, APPROVAL, approval);
      if (content === undefined) {
        // Missing or invalid: ask again (the SDK's convention; no hint of what was wrong).
        return ask();
      }
      if (content.approve !== true) {
        return { content: [{ type: "text", text: "Deployment was not approved." }], isError: true };
      }
      const result = { environment, deployed: true };
      return { content: [{ type: "text", text: JSON.stringify(result) }], structuredContent: result };
    },
  );
  return server;
}

const handler = createMcpHandler(deployServer, { legacy: "reject" });
const node = toNodeHandler(handler);
const port = Number(process.env.PORT ?? 3000);
const listener = http.createServer((req, res) => {
  if (new URL(req.url ?? "/", "http://localhost").pathname !== "/mcp") {
    res.writeHead(404).end();
    return;
  }
  node(req, res);
});
// TCP_NODELAY on every accepted socket, as the Rust servers set it (Node's default is on too).
listener.on("connection", (socket) => socket.setNoDelay(true));
listener.keepAliveTimeout = 60_000;
listener.listen(port, "127.0.0.1", () => console.log(`listening on http://127.0.0.1:${port}/mcp`));
