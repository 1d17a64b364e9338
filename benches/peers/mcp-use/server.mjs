// The `deploy` tool on mcp-use 2.5.2 (npm), after the `deploy` example of mcp-use's Elicitation
// page: `MCPServer.tool` with the SDK helpers mcp-use re-exports (`inputRequired`, `inputResponse`,
// `acceptedContent` with the form's zod schema, a re-ask when it fails), plus the request-state
// codec through mcp-use's own `requestState` option. Served by `MCPServer.listen` on
// 127.0.0.1:$PORT/mcp. Telemetry is off (MCP_USE_ANONYMIZED_TELEMETRY=false, set by the script).
//
// Run by scripts/peers.sh, which installs the package under .cache/peers/mcp-use.
import {
  MCPServer,
  acceptedContent,
  createRequestStateCodec,
  inputRequired,
  inputResponse,
} from "mcp-use";
import { z } from "zod";

const APPROVAL = "deployment-approval";
const approval = z.object({
  approve: z.boolean().describe("Approve"),
  note: z.string().max(200).optional().describe("Note"),
});
const codec = createRequestStateCodec({
  key: process.env.PEER_KEY ?? "peers-sh-request-state-key-32-bytes!",
  ttlSeconds: 600,
});

const server = new MCPServer({
  name: "deploy-mcp-use",
  version: "1.0.0",
  requestState: { verify: codec.verify },
  logging: { enabled: false },
  skills: false,
});

server.tool(
  {
    name: "deploy",
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
        requestState: await codec.mint({ environment }),
      });
    const answer = inputResponse(ctx.inputResponses, APPROVAL);
    const state = ctx.requestState();
    if (answer.kind === "missing" || state?.environment !== environment) {
      return ask();
    }
    if (answer.kind === "elicit" && answer.action !== "accept") {
      return { content: [{ type: "text", text: "Deployment was not approved." }], isError: true };
    }
    const content = acceptedContent(ctx.inputResponses, APPROVAL, approval);
    if (content === undefined) {
      return ask();
    }
    if (content.approve !== true) {
      return { content: [{ type: "text", text: "Deployment was not approved." }], isError: true };
    }
    const result = { environment, deployed: true };
    return { content: [{ type: "text", text: JSON.stringify(result) }], structuredContent: result };
  },
);

const { url } = await server.listen(Number(process.env.PORT ?? 3000), { host: "127.0.0.1" });
console.log(`listening on ${url}`);
