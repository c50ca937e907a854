// server.mjs is llama-server's HTTP side for modelserve's tests: the routes,
// status codes and bodies llama-server answers with, around real llama.cpp
// (engine.mjs). It is a test engine, not a server to serve models with; see
// README.md for what it leaves out.
import http from "node:http";
import path from "node:path";
import os from "node:os";
import crypto from "node:crypto";
import fs from "node:fs";
import { ArgError, parseArgs } from "./args.mjs";
import { HTTPError } from "./errors.mjs";

// The library's version names the build. node-llama-cpp does not export its
// package.json, so it is read from disk.
const libraryVersion = (() => {
    try {
        const file = new URL("./node_modules/node-llama-cpp/package.json", import.meta.url);
        return JSON.parse(fs.readFileSync(file, "utf8")).version;
    } catch {
        return "unknown";
    }
})();
const buildName = `llamatest node-llama-cpp ${libraryVersion}`;

const opts = (() => {
    try {
        return parseArgs(process.argv.slice(2));
    } catch (err) {
        if (!(err instanceof ArgError)) throw err;
        process.stderr.write(err.message + "\n");
        process.exit(1);
    }
})();

// log writes a line to stderr, where llama-server logs; --log-disable
// silences it, as it silences llama.cpp.
function log(line) {
    if (!opts.logDisable) process.stderr.write(line + "\n");
}

if (opts.version) {
    // llama.cpp prints its version to stderr and exits 0, whatever else the
    // command line holds.
    process.stderr.write(`version: 0 (${buildName})\n`);
    process.stderr.write(`built with node ${process.version} for ${process.platform}-${process.arch}\n`);
    process.exit(0);
}

// Faults for tests, read once at start.
const faults = {
    crashAtStart: process.env.LLAMATEST_CRASH_AT_START === "1",
    crashAfter: Number.parseInt(process.env.LLAMATEST_CRASH_AFTER ?? "", 10),
    neverReady: process.env.LLAMATEST_NEVER_READY === "1",
    loadDelayMs: Number.parseInt(process.env.LLAMATEST_LOAD_DELAY_MS ?? "", 10),
};

if (faults.crashAtStart) {
    process.stderr.write("error: LLAMATEST_CRASH_AT_START=1: the test engine fails at start as asked\n");
    process.exit(1);
}

if (!opts.model) {
    // Without a model the newest llama-server starts in router mode, which
    // the test engine does not implement; older ones failed to open a default
    // path. Either way no model is served.
    process.stderr.write("error: no model given: pass -m/--model (llamatest does not implement router mode)\n");
    process.exit(1);
}

const alias = opts.alias ? opts.alias.split(",")[0] : path.basename(opts.model);
const publicPaths = new Set(["/health", "/v1/health", "/models", "/v1/models", "/"]);
// While loading only the model list answers; llama-server's state
// middleware turns everything else away with 503.
const loadingPaths = new Set(["/models", "/v1/models"]);

let engine = null;
let ready = false;
let completed = 0;
const inflight = new AbortController();

log(`build: 0 (${buildName}) with node ${process.version} for ${process.platform}-${process.arch}`);
log(`system info: n_threads = ${opts.threads ?? os.availableParallelism()} / ${os.availableParallelism()}`);

const server = http.createServer((req, res) => {
    handle(req, res).catch((err) => {
        log(`srv  operator(): got exception: ${err && err.stack ? err.stack : err}`);
        if (!res.headersSent) sendError(res, new HTTPError(500, String(err && err.message ? err.message : err), "server_error"));
        else res.end();
    });
});

server.on("error", (err) => {
    log(`srv  start: couldn't bind HTTP server socket, hostname: ${opts.host}, port: ${opts.port}: ${err.message}`);
    log("main: exiting due to HTTP server error");
    process.exit(1);
});

// The HTTP server starts before the model loads, so /health can say
// "loading" meanwhile.
server.listen(opts.port, opts.host, () => {
    const { port } = server.address();
    log(`main: HTTP server is listening, hostname: ${opts.host}, port: ${port}, http threads: ${os.availableParallelism() + 3}`);
    load(port).catch((err) => {
        log(`main: unexpected error while loading: ${err && err.stack ? err.stack : err}`);
        process.exit(1);
    });
});

async function load(port) {
    log("main: loading model");
    if (faults.loadDelayMs > 0) await new Promise((r) => setTimeout(r, faults.loadDelayMs));
    log(`srv    load_model: loading model '${opts.model}'`);
    let sawLoadError = false;
    // Imported here, not at the top: loading node-llama-cpp takes a while,
    // and --version or a bad flag should answer at once.
    const { LoadError, loadEngine } = await import("./engine.mjs");
    try {
        engine = await loadEngine(opts, (line) => {
            if (line.includes("error loading model")) sawLoadError = true;
            log(line);
        });
    } catch (err) {
        if (!(err instanceof LoadError)) throw err;
        // node-llama-cpp reads the GGUF header itself before llama.cpp sees
        // the file (a missing file, a wrong magic); say it in llama.cpp's
        // words so a caller matching "error loading model" still finds it.
        if (!sawLoadError) log(`llama_model_load: error loading model: ${err.message}`);
        log(`common_init_from_params: failed to load model '${opts.model}'`);
        log(`srv    load_model: failed to load model, '${opts.model}'`);
        log("srv    operator(): operator(): cleaning up before exit...");
        log("main: exiting due to model loading error");
        process.exit(1);
    }
    log(`srv          init: initializing slots, n_slots = ${engine.parallel}`);
    log(`slot         init: id  0 | task -1 | new slot n_ctx_slot = ${engine.slotContext}`);
    if (faults.neverReady) {
        log("llamatest: LLAMATEST_NEVER_READY=1: staying in the loading state as asked");
        return;
    }
    ready = true;
    log("main: model loaded");
    log(`main: server is listening on http://${opts.host}:${port} - starting the main loop`);
    log("srv  update_slots: all slots are idle");
    // As in llama-server, the signal handlers are installed once the model
    // is loaded; before that a signal ends the process the default way.
    process.on("SIGTERM", shutdown);
    process.on("SIGINT", shutdown);
}

let terminating = false;
function shutdown() {
    if (terminating) {
        process.stderr.write("Received second interrupt, terminating immediately.\n");
        process.exit(1);
    }
    terminating = true;
    log("srv    operator(): operator(): cleaning up before exit...");
    inflight.abort(new Error("server is shutting down"));
    server.close();
    server.closeAllConnections();
    // Disposing the model frees llama.cpp's memory; should it ever hang, the
    // process still exits promptly, as a caller stopping it expects.
    setTimeout(() => process.exit(0), 3000).unref();
    (engine ? engine.dispose() : Promise.resolve()).finally(() => process.exit(0));
}

async function handle(req, res) {
    res.setHeader("Server", "llama.cpp");
    if (req.headers.origin) res.setHeader("Access-Control-Allow-Origin", req.headers.origin);
    const url = new URL(req.url, "http://x");
    const route = url.pathname;
    if (req.method === "OPTIONS") {
        res.setHeader("Access-Control-Allow-Credentials", "true");
        res.setHeader("Access-Control-Allow-Methods", "GET, POST");
        res.setHeader("Access-Control-Allow-Headers", "*");
        res.writeHead(200, { "Content-Type": "text/html" });
        res.end();
        return;
    }
    if (!ready && !loadingPaths.has(route)) {
        return sendError(res, new HTTPError(503, "Loading model", "unavailable_error"));
    }
    if (opts.apiKeys.length > 0 && !publicPaths.has(route) && !authorized(req)) {
        log("srv  operator(): unauthorized: Invalid API Key");
        return sendError(res, new HTTPError(401, "Invalid API Key", "authentication_error"));
    }
    const key = `${req.method} ${route}`;
    switch (key) {
        case "GET /health":
        case "GET /v1/health":
            return sendJSON(res, 200, { status: "ok" });
        case "GET /models":
        case "GET /v1/models":
            return sendJSON(res, 200, modelList());
        case "GET /props":
            return sendJSON(res, 200, props());
        case "GET /metrics":
            return metrics(res);
        case "POST /chat/completions":
        case "POST /v1/chat/completions":
            return countCompleted(res, chatCompletions(req, res));
        case "POST /v1/embeddings":
            return countCompleted(res, embeddings(req, res));
    }
    // cpp-httplib answers any unrouted method and path with this 404.
    return sendError(res, new HTTPError(404, "File Not Found", "not_found_error"));
}

// authorized checks the key as llama-server does: the Authorization header
// (else X-Api-Key), with or without a "Bearer " prefix.
function authorized(req) {
    let given = req.headers.authorization ?? req.headers["x-api-key"] ?? "";
    if (given.startsWith("Bearer ")) given = given.slice("Bearer ".length);
    return opts.apiKeys.some((k) => {
        const a = Buffer.from(k), b = Buffer.from(given);
        return a.length === b.length && crypto.timingSafeEqual(a, b);
    });
}

// countCompleted counts an inference request once its answer has gone out,
// for LLAMATEST_CRASH_AFTER.
async function countCompleted(res, work) {
    await work;
    if (!(faults.crashAfter > 0) || res.statusCode !== 200) return;
    const crash = () => {
        completed++;
        if (completed >= faults.crashAfter) {
            process.stderr.write(`error: LLAMATEST_CRASH_AFTER=${faults.crashAfter}: the test engine fails after ${completed} completed requests as asked\n`);
            process.exit(1);
        }
    };
    if (res.writableFinished) crash();
    else res.on("finish", crash);
}

function sendJSON(res, status, body) {
    const data = JSON.stringify(body);
    res.writeHead(status, {
        "Content-Type": "application/json; charset=utf-8",
        "Content-Length": Buffer.byteLength(data),
    });
    res.end(data);
}

function errorBody(err) {
    return { error: { code: err.code, message: err.message, type: err.type, ...err.extra } };
}

function sendError(res, err) {
    sendJSON(res, err.code, errorBody(err));
}

async function readJSON(req) {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const text = Buffer.concat(chunks).toString("utf8");
    try {
        return JSON.parse(text);
    } catch (err) {
        // nlohmann::json's parse error is not an invalid_argument, so
        // llama-server answers it with 500.
        throw new HTTPError(500, `[json.exception.parse_error.101] parse error: ${err.message}`, "server_error");
    }
}

function randomID(prefix) {
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    const bytes = crypto.randomBytes(32);
    let id = prefix;
    for (const b of bytes) id += alphabet[b % alphabet.length];
    return id;
}

function modelList() {
    const created = Math.floor(Date.now() / 1000);
    return {
        models: [{
            name: alias, model: alias, modified_at: "", size: "", digest: "", type: "model",
            description: "", tags: [""], capabilities: [opts.embedding ? "embedding" : "completion"],
            parameters: "",
            details: { parent_model: "", format: "gguf", family: "", families: [""], parameter_size: "", quantization_level: "" },
        }],
        object: "list",
        data: [{
            id: alias, object: "model", created, owned_by: "llamacpp",
            // llama-server reports no meta until the model has loaded.
            meta: ready ? engine.meta() : null,
        }],
    };
}

function props() {
    return {
        default_generation_settings: {
            id: 0, id_task: -1, n_ctx: engine.slotContext, speculative: false, is_processing: false,
            params: { n_predict: -1, temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, seed: -1, stream: false },
        },
        total_slots: engine.parallel,
        model_alias: alias,
        model_path: opts.model,
        modalities: { vision: false, audio: false },
        chat_template: engine.wrapper ? engine.chatTemplate : "chatml",
        bos_token: engine.model.tokens.bosString ?? "",
        eos_token: engine.model.tokens.eosString ?? "",
        build_info: `b0-${buildName}`,
        webui: opts.webui,
    };
}

function metrics(res) {
    if (!opts.metrics) {
        return sendError(res, new HTTPError(501, "This server does not support metrics endpoint. Start it with `--metrics`", "not_supported_error"));
    }
    const s = engine.stats;
    const lines = [];
    const metric = (name, type, help, value) => {
        lines.push(`# HELP llamacpp:${name} ${help}`, `# TYPE llamacpp:${name} ${type}`, `llamacpp:${name} ${value}`);
    };
    metric("prompt_tokens_total", "counter", "Number of prompt tokens processed.", s.promptTokens);
    metric("prompt_seconds_total", "counter", "Prompt process time", s.promptMs / 1000);
    metric("tokens_predicted_total", "counter", "Number of generation tokens processed.", s.predictedTokens);
    metric("tokens_predicted_seconds_total", "counter", "Predict process time", s.predictedMs / 1000);
    metric("n_decode_total", "counter", "Total number of llama_decode() calls", s.decodes);
    metric("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.", s.promptMs > 0 ? s.promptTokens / (s.promptMs / 1000) : 0);
    metric("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.", s.predictedMs > 0 ? s.predictedTokens / (s.predictedMs / 1000) : 0);
    metric("requests_processing", "gauge", "Number of requests processing.", engine.slots.busy);
    metric("requests_deferred", "gauge", "Number of requests deferred.", engine.slots.deferred);
    const body = lines.join("\n") + "\n";
    res.writeHead(200, { "Content-Type": "text/plain; version=0.0.4" });
    res.end(body);
}

// messagesOf validates and flattens OpenAI chat messages to {role, content}.
function messagesOf(body) {
    if (!Array.isArray(body.messages)) {
        throw new HTTPError(400, "Expected 'messages' to be an array", "invalid_request_error");
    }
    return body.messages.map((m) => {
        if (m === null || typeof m !== "object" || typeof m.role !== "string") {
            throw new HTTPError(400, "Missing 'role' in message", "invalid_request_error");
        }
        let content = m.content ?? "";
        if (Array.isArray(content)) {
            content = content.map((part) => {
                if (part?.type === "text") return String(part.text ?? "");
                throw new HTTPError(500, "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj", "server_error");
            }).join("\n");
        } else if (typeof content !== "string") {
            throw new HTTPError(400, "Invalid 'content' type", "invalid_request_error");
        }
        return { role: m.role, content };
    });
}

function numberOr(v, fallback) {
    return typeof v === "number" && Number.isFinite(v) ? v : fallback;
}

async function chatCompletions(req, res) {
    if (opts.embedding) {
        return sendError(res, new HTTPError(501, "This server does not support completions. Start it without `--embeddings`", "not_supported_error"));
    }
    let body;
    try {
        body = await readJSON(req);
        if (body === null || typeof body !== "object") throw new HTTPError(400, "Expected a JSON object", "invalid_request_error");
        if (numberOr(body.n, 1) !== 1) throw new HTTPError(400, "Only one completion choice is allowed", "invalid_request_error");
    } catch (err) {
        if (err instanceof HTTPError) return sendError(res, err);
        throw err;
    }
    const stream = body.stream === true;
    const id = randomID("chatcmpl-");
    const created = Math.floor(Date.now() / 1000);
    const base = { created, id, model: alias, system_fingerprint: `b0-${buildName}` };
    // A client that goes away stops its generation and frees its slot.
    const abort = new AbortController();
    const onAbort = () => abort.abort(new Error("aborted"));
    res.on("close", () => { if (!res.writableFinished) onAbort(); });
    inflight.signal.addEventListener("abort", onAbort, { once: true });
    const stop = typeof body.stop === "string" ? [body.stop] : Array.isArray(body.stop) ? body.stop.filter((s) => typeof s === "string" && s !== "") : [];
    let started = false;
    const params = {
        maxTokens: numberOr(body.max_completion_tokens, numberOr(body.max_tokens, numberOr(body.n_predict, -1))),
        temperature: numberOr(body.temperature, 0.8),
        topK: numberOr(body.top_k, 40),
        topP: numberOr(body.top_p, 0.95),
        minP: numberOr(body.min_p, 0.05),
        seed: numberOr(body.seed, -1) >= 0 ? body.seed : undefined,
        stop,
        signal: abort.signal,
        onText: stream ? (text) => {
            if (!started) startStream();
            sse({ ...base, object: "chat.completion.chunk", choices: [{ finish_reason: null, index: 0, delta: { content: text } }] });
        } : undefined,
    };
    const sse = (obj) => res.write(`data: ${JSON.stringify(obj)}\n\n`);
    const startStream = () => {
        started = true;
        res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
        sse({ ...base, object: "chat.completion.chunk", choices: [{ finish_reason: null, index: 0, delta: { role: "assistant", content: null } }] });
    };
    let out;
    try {
        params.messages = messagesOf(body);
        out = await engine.complete(params);
    } catch (err) {
        const e = err instanceof HTTPError ? err : new HTTPError(500, String(err && err.message ? err.message : err), "server_error");
        if (!started) return sendError(res, e);
        res.end(`error: ${JSON.stringify(errorBody(e))}\n\n`);
        return;
    } finally {
        inflight.signal.removeEventListener("abort", onAbort);
    }
    const usage = {
        completion_tokens: out.completionTokens,
        prompt_tokens: out.promptTokens,
        total_tokens: out.promptTokens + out.completionTokens,
    };
    if (!stream) {
        return sendJSON(res, 200, {
            choices: [{ finish_reason: out.finishReason, index: 0, message: { role: "assistant", content: out.text } }],
            ...base,
            object: "chat.completion",
            usage,
            timings: out.timings,
        });
    }
    if (!started) startStream();
    sse({ ...base, object: "chat.completion.chunk", choices: [{ finish_reason: out.finishReason, index: 0, delta: {} }], timings: out.timings });
    if (body.stream_options?.include_usage) {
        sse({ ...base, object: "chat.completion.chunk", choices: [], usage, timings: out.timings });
    }
    res.end("data: [DONE]\n\n");
}

// inputsOf accepts what /v1/embeddings accepts: a string, an array of
// strings, an array of token ids, or an array of arrays of token ids.
function inputsOf(body) {
    const input = body.input !== undefined ? body.input : body.content;
    if (input === undefined) throw new HTTPError(400, "\"input\" or \"content\" must be provided", "invalid_request_error");
    const isTokens = (a) => Array.isArray(a) && a.length > 0 && a.every((x) => Number.isInteger(x));
    if (typeof input === "string") return [input];
    if (isTokens(input)) return [input];
    if (Array.isArray(input) && input.length > 0 && input.every((x) => typeof x === "string" || isTokens(x))) return input;
    throw new HTTPError(400, "\"prompt\" must be a string, a list of tokens, a list of mixed strings & tokens, or a list of prompts", "invalid_request_error");
}

async function embeddings(req, res) {
    if (!opts.embedding) {
        return sendError(res, new HTTPError(501, "This server does not support embeddings. Start it with `--embeddings`", "not_supported_error"));
    }
    try {
        const body = await readJSON(req);
        if (body === null || typeof body !== "object") throw new HTTPError(400, "Expected a JSON object", "invalid_request_error");
        const inputs = inputsOf(body);
        const base64 = body.encoding_format === "base64";
        const out = await engine.embed(inputs);
        const total = out.reduce((n, e) => n + e.tokens, 0);
        return sendJSON(res, 200, {
            model: alias,
            object: "list",
            usage: { prompt_tokens: total, total_tokens: total },
            data: out.map((e, index) => ({
                embedding: base64 ? Buffer.from(new Float32Array(e.vector).buffer).toString("base64") : e.vector,
                index,
                object: "embedding",
            })),
        });
    } catch (err) {
        if (err instanceof HTTPError) return sendError(res, err);
        return sendError(res, new HTTPError(500, String(err && err.message ? err.message : err), "server_error"));
    }
}
