#!/usr/bin/env node
// A 2025-era MCP server on the TypeScript SDK 1.x (`@modelcontextprotocol/sdk`), with the tools,
// prompts and resources the official conformance suite's server scenarios call: the 2025-11-25
// requirement set (`test_simple_text`, `test_elicitation`, `test_prompt_with_arguments`,
// `test://static-text`, …) and the fixtures of the `input-required-result-*` scenarios
// (`test_input_required_result_*`, the prompt `test_input_required_result_prompt`).
//
// It is a plain 2025-era server: every question it has is a server-to-client request made
// while the call runs (`elicitation/create`, `sampling/createMessage`, `roots/list`, sent on the
// call's own stream), never an `input_required` result. scripts/conformance-upstream.sh runs the
// suite against it bare, and behind the upstream adapter (tools/src/bin/front.rs), which turns
// those requests into 2026-07-28 `input_required` rounds.
//
//   node tests/upstream/conformance_fixture.mjs              # stdio
//   node tests/upstream/conformance_fixture.mjs --http PORT  # Streamable HTTP, 127.0.0.1:PORT/mcp
//
// Over HTTP it keeps a session per `initialize` (`Mcp-Session-Id`, as the SDK's examples do) and
// refuses (403) a Host or Origin that is not localhost, 127.0.0.1 or [::1].
//
// The SDK is loaded from the node_modules that scripts/upstream-servers.sh installs (pinned):
// `$UPSTREAM_NODE_MODULES` if set, else `.cache/upstream/node_modules` at the repository root
// (found from this file's own path, so the working directory does not matter). It is loaded with
// `createRequire` from there (the SDK's CommonJS build): ESM ignores NODE_PATH, and no
// node_modules needs to sit next to this file.

import { createRequire } from 'node:module';
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const nodeModules =
    process.env.UPSTREAM_NODE_MODULES ?? path.join(here, '..', '..', '.cache', 'upstream', 'node_modules');
const require = createRequire(path.join(nodeModules, 'noop.js'));

const { Server } = require('@modelcontextprotocol/sdk/server/index.js');
const { StdioServerTransport } = require('@modelcontextprotocol/sdk/server/stdio.js');
const { StreamableHTTPServerTransport } = require('@modelcontextprotocol/sdk/server/streamableHttp.js');
const {
    CallToolRequestSchema,
    CompleteRequestSchema,
    GetPromptRequestSchema,
    ListPromptsRequestSchema,
    ListResourceTemplatesRequestSchema,
    ListResourcesRequestSchema,
    ListToolsRequestSchema,
    ReadResourceRequestSchema,
    SubscribeRequestSchema,
    UnsubscribeRequestSchema,
    McpError,
    ErrorCode,
    isInitializeRequest,
} = require('@modelcontextprotocol/sdk/types.js');

// A 1x1 PNG and a minimal WAV, base64.
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';

const text = (t) => ({ type: 'text', text: t });
const done = (t) => ({ content: [text(t)] });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A form of one required field. */
function form(message, field, type = 'string') {
    return { message, requestedSchema: { type: 'object', properties: { [field]: { type } }, required: [field] } };
}

/** One user message for `sampling/createMessage`. */
function sample(question, maxTokens) {
    return { messages: [{ role: 'user', content: text(question) }], maxTokens };
}

function sampledText(result) {
    const content = Array.isArray(result.content) ? result.content[0] : result.content;
    return content?.text ?? '(no text)';
}

function field(result, name) {
    return result.action === 'accept' ? result.content?.[name] : undefined;
}

// ---- tools ----

/** name → { description, inputSchema, run(args, ask, extra) }; `ask` makes the server's requests. */
const tools = {
    test_simple_text: {
        description: 'Answers a fixed text.',
        run: async () => done('This is a simple text response for testing.'),
    },
    test_image_content: {
        description: 'Answers an image.',
        run: async () => ({ content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] }),
    },
    test_audio_content: {
        description: 'Answers an audio clip.',
        run: async () => ({ content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] }),
    },
    test_embedded_resource: {
        description: 'Answers an embedded resource.',
        run: async () => ({
            content: [{
                type: 'resource',
                resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' },
            }],
        }),
    },
    test_multiple_content_types: {
        description: 'Answers text, an image and an embedded resource.',
        run: async () => ({
            content: [
                text('Multiple content types test:'),
                { type: 'image', data: PNG, mimeType: 'image/png' },
                {
                    type: 'resource',
                    resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' },
                },
            ],
        }),
    },
    test_tool_with_logging: {
        description: 'Sends three info log messages while it runs.',
        run: async (_args, _ask, extra) => {
            for (const data of ['Tool execution started', 'Tool processing data', 'Tool execution completed']) {
                await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } });
                await sleep(50);
            }
            return done('Tool with logging executed successfully');
        },
    },
    test_tool_with_progress: {
        description: 'Sends three progress notifications (0, 50, 100 of 100).',
        run: async (_args, _ask, extra) => {
            const progressToken = extra._meta?.progressToken;
            if (progressToken !== undefined) {
                for (const progress of [0, 50, 100]) {
                    await extra.sendNotification({
                        method: 'notifications/progress',
                        params: { progressToken, progress, total: 100, message: `Completed step ${progress} of 100` },
                    });
                    await sleep(50);
                }
            }
            return done(`Progress complete (token ${String(progressToken)})`);
        },
    },
    test_error_handling: {
        description: 'Fails (isError).',
        run: async () => {
            throw new Error('This tool intentionally returns an error for testing');
        },
    },
    test_sampling: {
        description: "Asks the client's model (sampling/createMessage), then answers with its text.",
        inputSchema: { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] },
        run: async (args, ask) => done(`LLM response: ${sampledText(await ask.sample(sample(args.prompt, 100)))}`),
    },
    test_elicitation: {
        description: 'Asks for a username and an email (elicitation/create), then echoes the answer.',
        inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] },
        run: async (args, ask) => {
            const answer = await ask.elicit({
                message: args.message,
                requestedSchema: {
                    type: 'object',
                    properties: {
                        username: { type: 'string', description: 'Your username' },
                        email: { type: 'string', description: 'Your email address' },
                    },
                    required: ['username', 'email'],
                },
            });
            return done(`User response: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
        },
    },
    test_elicitation_sep1034_defaults: {
        description: 'SEP-1034: a form whose every field has a default.',
        run: async (_args, ask) => {
            const answer = await ask.elicit({
                message: 'Please review and update the form fields with defaults',
                requestedSchema: {
                    type: 'object',
                    properties: {
                        name: { type: 'string', description: 'User name', default: 'John Doe' },
                        age: { type: 'integer', description: 'User age', default: 30 },
                        score: { type: 'number', description: 'User score', default: 95.5 },
                        status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
                        verified: { type: 'boolean', description: 'Verification status', default: true },
                    },
                    required: [],
                },
            });
            return done(`Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
        },
    },
    test_elicitation_sep1330_enums: {
        description: 'SEP-1330: a form with every kind of enum.',
        run: async (_args, ask) => {
            const answer = await ask.elicit({
                message: 'Please select options from the enum fields',
                requestedSchema: {
                    type: 'object',
                    properties: {
                        untitledSingle: { type: 'string', description: 'Select one option', enum: ['option1', 'option2', 'option3'] },
                        titledSingle: {
                            type: 'string',
                            description: 'Select one option with titles',
                            oneOf: [
                                { const: 'value1', title: 'First Option' },
                                { const: 'value2', title: 'Second Option' },
                                { const: 'value3', title: 'Third Option' },
                            ],
                        },
                        legacyEnum: {
                            type: 'string',
                            description: 'Select one option (legacy)',
                            enum: ['opt1', 'opt2', 'opt3'],
                            enumNames: ['Option One', 'Option Two', 'Option Three'],
                        },
                        untitledMulti: {
                            type: 'array',
                            description: 'Select multiple options',
                            minItems: 1,
                            maxItems: 3,
                            items: { type: 'string', enum: ['option1', 'option2', 'option3'] },
                        },
                        titledMulti: {
                            type: 'array',
                            description: 'Select multiple options with titles',
                            minItems: 1,
                            maxItems: 3,
                            items: {
                                anyOf: [
                                    { const: 'value1', title: 'First Choice' },
                                    { const: 'value2', title: 'Second Choice' },
                                    { const: 'value3', title: 'Third Choice' },
                                ],
                            },
                        },
                    },
                    required: [],
                },
            });
            return done(`Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
        },
    },

    json_schema_2020_12_tool: {
        description: 'SEP-1613: an input schema with JSON Schema 2020-12 keywords ($schema, $defs).',
        inputSchema: {
            $schema: 'https://json-schema.org/draft/2020-12/schema',
            type: 'object',
            $defs: { address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
            properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
            additionalProperties: false,
        },
        run: async (args) => done(`JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`),
    },

    // The fixtures of the `input-required-result-*` scenarios, asked the 2025 way.
    test_input_required_result_elicitation: {
        description: "Asks the user's name, then greets.",
        run: async (_args, ask) => {
            // The scenarios expect the key `user_name`: named for the adapter in `_meta` (a
            // 2025-era request has no key; without it the adapter names it `elicitation-1`).
            const question = form('What is your name?', 'name');
            question._meta = { 'tower-elicitation/inputKey': 'user_name' };
            const answer = await ask.elicit(question);
            const name = field(answer, 'name');
            return name === undefined ? { content: [text('No name was given.')], isError: true } : done(`Hello, ${name}!`);
        },
    },
    test_input_required_result_sampling: {
        description: "Asks the client's model what the capital of France is.",
        run: async (_args, ask) =>
            done(`Sampling result: ${sampledText(await ask.sample(sample('What is the capital of France?', 100)))}`),
    },
    test_input_required_result_list_roots: {
        description: "Asks the client's roots.",
        run: async (_args, ask) => {
            const { roots } = await ask.roots();
            return done(`Found ${roots.length} root(s): ${roots.map((r) => r.uri).join(', ')}`);
        },
    },
    test_input_required_result_request_state: {
        description: 'Asks for a confirmation; answers state-ok.',
        run: async (_args, ask) => {
            const answer = await ask.elicit(form('Please confirm', 'ok', 'boolean'));
            return done(`state-ok: confirmed=${field(answer, 'ok')}`);
        },
    },
    test_input_required_result_tampered_state: {
        description: 'Asks for a confirmation (the suite then tampers with the state).',
        run: async (_args, ask) => {
            const answer = await ask.elicit(form('Please confirm', 'ok', 'boolean'));
            return done(`state-ok: confirmed=${field(answer, 'ok')}`);
        },
    },
    test_input_required_result_multiple_inputs: {
        description: 'Asks a name, a sampled greeting and the roots, all at once.',
        run: async (_args, ask) => {
            const [name, greeting, roots] = await Promise.all([
                ask.elicit(form('What is your name?', 'name')),
                ask.sample(sample('Generate a greeting', 50)),
                ask.roots(),
            ]);
            return done(
                `Name: ${field(name, 'name') ?? '(declined)'}; greeting: ${sampledText(greeting)}; ${roots.roots.length} root(s)`,
            );
        },
    },
    test_input_required_result_multi_round: {
        description: 'Asks a name, then a favourite colour.',
        run: async (_args, ask) => {
            const name = field(await ask.elicit(form('Step 1: What is your name?', 'name')), 'name');
            const color = field(await ask.elicit(form('Step 2: What is your favorite color?', 'color')), 'color');
            return done(`Multi-round complete for ${name} who likes ${color}`);
        },
    },
    test_input_required_result_capabilities: {
        description: 'Asks only what the client declared (elicitation and/or sampling) at initialize.',
        run: async (_args, ask, _extra, declared) => {
            const questions = [];
            if (declared?.elicitation) questions.push(ask.elicit(form('Please provide a value', 'value')));
            if (declared?.sampling) questions.push(ask.sample(sample('Say something', 50)));
            if (questions.length === 0) return done('No supported capabilities declared');
            await Promise.all(questions);
            return done('Capabilities respected');
        },
    },
};

// ---- resources ----

const resources = {
    'test://static-text': {
        name: 'static-text',
        title: 'Static Text Resource',
        description: 'A static text resource for testing',
        mimeType: 'text/plain',
        read: (uri) => ({ uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }),
    },
    'test://static-binary': {
        name: 'static-binary',
        title: 'Static Binary Resource',
        description: 'A static binary resource (image) for testing',
        mimeType: 'image/png',
        read: (uri) => ({ uri, mimeType: 'image/png', blob: PNG }),
    },
    'test://watched-resource': {
        name: 'watched-resource',
        title: 'Watched Resource',
        description: 'A resource one can subscribe to',
        mimeType: 'text/plain',
        read: (uri) => ({ uri, mimeType: 'text/plain', text: 'Watched resource content' }),
    },
};
const TEMPLATE = /^test:\/\/template\/([^/]+)\/data$/;

// ---- prompts ----

const prompts = {
    test_simple_prompt: {
        description: 'A simple prompt without arguments',
        get: async () => [{ role: 'user', content: text('This is a simple prompt for testing.') }],
    },
    test_prompt_with_arguments: {
        description: 'A prompt with required arguments',
        arguments: [
            { name: 'arg1', description: 'First test argument', required: true },
            { name: 'arg2', description: 'Second test argument', required: true },
        ],
        get: async (args) => [{ role: 'user', content: text(`Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'`) }],
    },
    test_prompt_with_embedded_resource: {
        description: 'A prompt that includes an embedded resource',
        arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }],
        get: async (args) => [
            {
                role: 'user',
                content: { type: 'resource', resource: { uri: args.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } },
            },
            { role: 'user', content: text('Please process the embedded resource above.') },
        ],
    },
    test_prompt_with_image: {
        description: 'A prompt that includes image content',
        get: async () => [
            { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
            { role: 'user', content: text('Please analyze the image above.') },
        ],
    },
    test_input_required_result_prompt: {
        description: 'Asks what context the prompt should use (elicitation/create).',
        get: async (_args, ask) => {
            const answer = await ask.elicit(form('What context should the prompt use?', 'context'));
            return [{ role: 'user', content: text(`Prompt with context: ${field(answer, 'context') ?? '(declined)'}`) }];
        },
    },
};

// ---- the server ----

function newServer() {
    const server = new Server(
        { name: 'tower-elicitation-conformance-fixture', version: '1.0.0' },
        {
            capabilities: {
                tools: {},
                prompts: {},
                resources: { subscribe: true },
                logging: {},
                completions: {},
            },
        },
    );
    // The server's requests to the client, sent on the stream of the request that makes them.
    const asker = (extra) => {
        const options = { relatedRequestId: extra.requestId };
        return {
            elicit: (params) => server.elicitInput(params, options),
            sample: (params) => server.createMessage(params, options),
            roots: () => server.listRoots(undefined, options),
        };
    };

    server.setRequestHandler(ListToolsRequestSchema, async () => ({
        tools: Object.entries(tools).map(([name, tool]) => ({
            name,
            description: tool.description,
            inputSchema: tool.inputSchema ?? { type: 'object', properties: {} },
        })),
    }));
    server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
        const tool = tools[request.params.name];
        if (!tool) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
        try {
            return await tool.run(request.params.arguments ?? {}, asker(extra), extra, server.getClientCapabilities());
        } catch (error) {
            return { content: [text(error instanceof Error ? error.message : String(error))], isError: true };
        }
    });

    server.setRequestHandler(ListResourcesRequestSchema, async () => ({
        resources: Object.entries(resources).map(([uri, { read: _read, ...meta }]) => ({ uri, ...meta })),
    }));
    server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
        resourceTemplates: [{
            uriTemplate: 'test://template/{id}/data',
            name: 'template',
            title: 'Resource Template',
            description: 'A resource template with parameter substitution',
            mimeType: 'application/json',
        }],
    }));
    server.setRequestHandler(ReadResourceRequestSchema, async (request) => {
        const { uri } = request.params;
        if (resources[uri]) return { contents: [resources[uri].read(uri)] };
        const match = TEMPLATE.exec(uri);
        if (match) {
            const id = decodeURIComponent(match[1]);
            const data = { id, templateTest: true, data: `Data for ID: ${id}` };
            return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify(data) }] };
        }
        throw new McpError(-32002, `Resource not found: ${uri}`, { uri });
    });
    const subscriptions = new Set();
    server.setRequestHandler(SubscribeRequestSchema, async (request) => {
        subscriptions.add(request.params.uri);
        return {};
    });
    server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
        subscriptions.delete(request.params.uri);
        return {};
    });

    server.setRequestHandler(ListPromptsRequestSchema, async () => ({
        prompts: Object.entries(prompts).map(([name, prompt]) => ({
            name,
            description: prompt.description,
            ...(prompt.arguments ? { arguments: prompt.arguments } : {}),
        })),
    }));
    server.setRequestHandler(GetPromptRequestSchema, async (request, extra) => {
        const prompt = prompts[request.params.name];
        if (!prompt) throw new McpError(ErrorCode.InvalidParams, `Unknown prompt: ${request.params.name}`);
        for (const argument of prompt.arguments ?? []) {
            if (argument.required && request.params.arguments?.[argument.name] === undefined) {
                throw new McpError(ErrorCode.InvalidParams, `Missing argument: ${argument.name}`);
            }
        }
        return { description: prompt.description, messages: await prompt.get(request.params.arguments ?? {}, asker(extra)) };
    });

    // No argument has suggestions.
    server.setRequestHandler(CompleteRequestSchema, async () => ({ completion: { values: [], total: 0, hasMore: false } }));
    return server;
}

// ---- transports ----

async function serveStdio() {
    await newServer().connect(new StdioServerTransport());
}

const LOCAL = new Set(['localhost', '127.0.0.1', '[::1]']);
/** Host and Origin, when present, name this machine (DNS rebinding protection). */
function local(req) {
    const hostname = (value) => {
        try {
            return new URL(value).hostname;
        } catch {
            return undefined;
        }
    };
    const host = req.headers.host;
    if (!host || !LOCAL.has(hostname(`http://${host}`))) return false;
    const origin = req.headers.origin;
    return origin === undefined || LOCAL.has(hostname(origin));
}

function reply(res, status, message) {
    res.writeHead(status, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

async function readJson(req) {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

function serveHttp(port) {
    const sessions = new Map();
    const http = createServer(async (req, res) => {
        try {
            if (new URL(req.url, 'http://localhost').pathname !== '/mcp') return reply(res, 404, 'Not found');
            if (!local(req)) return reply(res, 403, 'Forbidden: Host or Origin is not localhost');
            const sessionId = req.headers['mcp-session-id'];
            const body = req.method === 'POST' ? await readJson(req).catch(() => undefined) : undefined;
            if (req.method === 'POST' && body === undefined) return reply(res, 400, 'Parse error');
            let transport = sessionId ? sessions.get(sessionId) : undefined;
            if (!transport) {
                if (sessionId) return reply(res, 404, 'Session not found');
                if (req.method !== 'POST' || !isInitializeRequest(body)) {
                    return reply(res, 400, 'Bad Request: No valid session ID provided');
                }
                transport = new StreamableHTTPServerTransport({
                    sessionIdGenerator: () => randomUUID(),
                    onsessioninitialized: (id) => sessions.set(id, transport),
                });
                transport.onclose = () => {
                    if (transport.sessionId) sessions.delete(transport.sessionId);
                };
                await newServer().connect(transport);
            }
            await transport.handleRequest(req, res, body);
        } catch (error) {
            console.error('conformance_fixture:', error);
            if (!res.headersSent) reply(res, 500, 'Internal server error');
        }
    });
    http.listen(port, '127.0.0.1', () => {
        console.error(`conformance_fixture: listening on http://127.0.0.1:${http.address().port}/mcp`);
    });
}

const args = process.argv.slice(2);
if (args[0] === '--http') {
    serveHttp(Number(args[1] ?? 0));
} else if (args.length === 0) {
    await serveStdio();
} else {
    console.error('usage: conformance_fixture.mjs [--http PORT]');
    process.exit(2);
}
