// engine.mjs is the real llama.cpp side of the test engine: it loads the
// model through node-llama-cpp and generates or embeds with it, shaped the
// way llama-server's slots are (a total context shared by --parallel
// sequences, requests beyond them waiting their turn).
import fs from "node:fs";
import {
    getLlama, LlamaLogLevel, JinjaTemplateChatWrapper, SpecialToken,
} from "node-llama-cpp";
import { HTTPError } from "./errors.mjs";

// llama.cpp's vocabulary type numbers (enum llama_vocab_type), as
// /v1/models reports them.
const vocabTypes = { none: 0, spm: 1, bpe: 2, wpm: 3, ugm: 4, rwkv: 5, plamo2: 6 };

// Slots hands out context sequences, one per request; a request that finds
// none free waits in line, as llama-server defers a task when every slot is
// busy.
class Slots {
    constructor(items) {
        this.total = items.length;
        this.free = [...items];
        this.waiting = [];
    }
    acquire() {
        if (this.free.length > 0) return Promise.resolve(this.free.pop());
        return new Promise((resolve) => this.waiting.push(resolve));
    }
    release(item) {
        const next = this.waiting.shift();
        if (next) next(item);
        else this.free.push(item);
    }
    get busy() { return this.total - this.free.length; }
    get deferred() { return this.waiting.length; }
}

// loadEngine loads the model as opts describe. log receives llama.cpp's own
// log lines as they come, so a refusal reaches stderr in the engine's words.
// It throws LoadError when the model cannot load.
export class LoadError extends Error {}

export async function loadEngine(opts, log) {
    // progressLogs off: node-llama-cpp's progress bars are not llama-server's.
    // Warnings and errors are kept: they are how llama.cpp says why a model
    // will not load.
    const llama = await getLlama({
        gpu: false,
        build: "never",
        progressLogs: false,
        logLevel: LlamaLogLevel.warn,
        logger: (level, message) => {
            const text = String(message).trimEnd();
            // node-llama-cpp's own notes (a retried estimate, a tokenizer
            // round-trip check), not llama.cpp's.
            if (text === "" || text.startsWith("Failed simulating model resource usage") || text.startsWith("Using this model (")) return;
            log(text);
        },
    });
    let model;
    try {
        model = await llama.loadModel({
            modelPath: opts.model,
            // llama.cpp does not refuse a model because node-llama-cpp
            // guesses it will not fit; neither does the engine it stands in for.
            ignoreMemorySafetyChecks: true,
        });
    } catch (err) {
        await llama.dispose().catch(() => {});
        throw new LoadError(err && err.message ? err.message : String(err));
    }
    if (opts.mmproj) {
        // node-llama-cpp has no multimodal support, so the projector is only
        // checked for being a readable GGUF file, which is where a wrong path
        // makes llama-server stop.
        checkProjector(opts.mmproj);
    }
    const engine = new Engine(llama, model, opts);
    try {
        await engine.createContexts();
    } catch (err) {
        await engine.dispose();
        throw new LoadError(err && err.message ? err.message : String(err));
    }
    return engine;
}

function checkProjector(path) {
    let fd;
    try {
        fd = fs.openSync(path, "r");
        const magic = Buffer.alloc(4);
        fs.readSync(fd, magic, 0, 4, 0);
        if (magic.toString("latin1") !== "GGUF") {
            throw new Error(`invalid magic characters: '${magic.toString("latin1")}', expected 'GGUF'`);
        }
    } catch (err) {
        throw new LoadError(`failed to load multimodal model, '${path}': ${err.message}`);
    } finally {
        if (fd !== undefined) fs.closeSync(fd);
    }
}

class Engine {
    constructor(llama, model, opts) {
        this.llama = llama;
        this.model = model;
        this.opts = opts;
        this.arch = model.fileInfo.metadata.general?.architecture ?? "";
        const archMeta = model.fileInfo.metadata[this.arch] ?? {};
        // llama.cpp leaves pooling at "none" unless the file says otherwise;
        // /v1/embeddings refuses "none".
        this.pooling = Number(archMeta.pooling_type ?? 0);
        this.chatTemplate = model.fileInfo.metadata.tokenizer?.chat_template ?? "";
        this.wrapper = null;
        this.stats = { promptTokens: 0, promptMs: 0, predictedTokens: 0, predictedMs: 0, decodes: 0 };
    }

    async createContexts() {
        const o = this.opts;
        const total = o.ctxSize > 0 ? o.ctxSize : this.model.trainContextSize;
        // llama-server splits --ctx-size among --parallel slots. With
        // --parallel left to auto it runs four slots on one unified cache,
        // each of which may use the whole context. node-llama-cpp's
        // contextSize is per sequence, so the split is done here.
        const sequences = o.parallel > 0 ? o.parallel : 4;
        const perSlot = o.parallel > 0 ? Math.max(1, Math.floor(total / o.parallel)) : total;
        const common = { ignoreMemorySafetyChecks: true };
        // Without -t llama-server uses one thread per physical core; so does
        // this. Tests should pass -t: on a busy two-core machine anything
        // above one thread made the tiny model tens of times slower.
        common.threads = o.threads != null && o.threads > 0 ? o.threads : this.llama.cpuMathCores;
        if (o.batchSize != null || o.ubatchSize != null) {
            common.batchSize = Math.min(o.batchSize ?? 2048, o.ubatchSize ?? 512);
        }
        if (o.flashAttn === "on") common.flashAttention = true;
        if (o.flashAttn === "off") common.flashAttention = false;
        if (o.embedding) {
            // One embedding context: requests take turns on it.
            const ctx = await this.model.createEmbeddingContext({
                contextSize: perSlot,
                // node-llama-cpp would default an embedding context to 6
                // threads, whatever -t says.
                threads: common.threads,
                batchSize: common.batchSize,
                ignoreMemorySafetyChecks: true,
            });
            this.embedder = ctx;
            this.slotContext = perSlot;
            this.slots = new Slots([ctx]);
            return;
        }
        this.context = await this.model.createContext({ contextSize: perSlot, sequences, ...common });
        this.slotContext = this.context.contextSize;
        const seqs = [];
        for (let i = 0; i < sequences; i++) seqs.push(this.context.getSequence());
        this.slots = new Slots(seqs);
        if (this.chatTemplate && o.jinja) {
            try {
                this.wrapper = new JinjaTemplateChatWrapper({ template: this.chatTemplate });
            } catch (err) {
                // llama-server falls back to ChatML when it cannot use a
                // template; so does this.
                this.wrapper = null;
            }
        }
    }

    get parallel() { return this.slots.total; }

    // meta is what /v1/models reports about the model.
    meta() {
        const m = this.model;
        return {
            vocab_type: vocabTypes[m.vocabularyType] ?? 0,
            n_vocab: m.fileInfo.metadata.tokenizer?.ggml?.tokens?.length ?? 0,
            n_ctx_train: m.trainContextSize,
            n_embd: m.embeddingVectorSize,
            n_params: m.fileInsights.totalParameters,
            size: m.size,
        };
    }

    // prompt renders chat messages the way llama-server does: with the
    // file's template when it has one, else ChatML.
    prompt(messages) {
        if (this.wrapper) {
            const history = messages.map((msg) =>
                msg.role === "assistant"
                    ? { type: "model", response: [msg.content] }
                    : { type: msg.role === "system" ? "system" : "user", text: msg.content });
            history.push({ type: "model", response: [] });
            const { contextText } = this.wrapper.generateContextState({ chatHistory: history });
            let text = contextText.values.map((v) =>
                v instanceof SpecialToken
                    ? this.model.detokenize(v.tokenize(this.model.tokenizer), true)
                    : typeof v === "string" ? v : String(v.value ?? "")).join("");
            // tokens() adds the model's BOS, as llama.cpp's tokenizer does;
            // a template's own would be a second one.
            const bos = this.model.tokens.bosString;
            if (bos && text.startsWith(bos)) text = text.slice(bos.length);
            return text;
        }
        let text = "";
        for (const msg of messages) text += `<|im_start|>${msg.role}\n${msg.content}<|im_end|>\n`;
        return text + "<|im_start|>assistant\n";
    }

    // bosToPrepend is the token llama.cpp's tokenizer puts before a prompt,
    // or null, by the rule node-llama-cpp follows for the same vocabularies.
    bosToPrepend() {
        const type = this.model.vocabularyType;
        const toks = this.model.tokens;
        if (type === "rwkv" || type === "ugm") return null;
        if (type === "wpm") return toks.bos;
        return toks.shouldPrependBosToken ? toks.bos : null;
    }

    // tokens tokenizes text as llama-server tokenizes a prompt: special
    // tokens parsed, the model's BOS (and EOS, where the vocabulary wants
    // one) added.
    tokens(text, { eos = false } = {}) {
        const t = this.model.tokenize(text, true);
        const bos = this.bosToPrepend();
        const toks = this.model.tokens;
        if (bos != null && t[0] !== bos) t.unshift(bos);
        if (eos && toks.shouldAppendEosToken && toks.eos != null && t.at(-1) !== toks.eos) t.push(toks.eos);
        return t;
    }

    // complete generates on a free slot. p: {messages, maxTokens, temperature,
    // topK, topP, minP, seed, stop, signal, onText}.
    //
    // It runs llama.cpp's sampling loop itself rather than through
    // node-llama-cpp's LlamaCompletion, so that it counts what llama-server
    // counts: every token sampled, the end-of-generation token included, and
    // max_tokens exactly. (LlamaCompletion reports no count, and its
    // callbacks hold back and merge tokens.)
    async complete(p) {
        const input = this.tokens(this.prompt(p.messages));
        const promptTokens = input.length;
        if (promptTokens >= this.slotContext) {
            throw new HTTPError(400, "the request exceeds the available context size, try increasing it",
                "exceed_context_size_error", { n_prompt_tokens: promptTokens, n_ctx: this.slotContext });
        }
        const seq = await this.slots.acquire();
        try {
            if (p.signal?.aborted) throw p.signal.reason ?? new Error("aborted");
            // A fresh sequence each time, so prompt_n is the whole prompt and
            // no earlier request's cache is reported as work.
            await seq.clearHistory();
            return await this.generate(seq, input, p);
        } finally {
            this.slots.release(seq);
        }
    }

    async generate(seq, input, p) {
        const model = this.model;
        const tokens = [];
        let text = "";
        let sent = 0; // how much of text has gone to onText
        let finishReason = "stop";
        let eog = false;
        let first = 0;
        const t0 = performance.now();
        const iterator = seq.evaluate(input, {
            temperature: p.temperature,
            topK: p.topK,
            topP: p.topP,
            minP: p.minP,
            seed: p.seed,
            yieldEogToken: true,
        });
        for await (const token of iterator) {
            if (first === 0) first = performance.now();
            if (model.isEogToken(token)) {
                eog = true; // counted below, as llama-server counts it
                break;
            }
            tokens.push(token);
            text = model.detokenize(tokens);
            const hit = firstStop(text, p.stop);
            if (hit >= 0) {
                text = text.slice(0, hit);
                break;
            }
            // Hold back what may be the start of a stop text or half of a
            // UTF-8 character, as llama-server does when streaming.
            const safe = text.endsWith("\uFFFD") ? sent : text.length - partialStop(text, p.stop);
            if (p.onText && safe > sent) {
                p.onText(text.slice(sent, safe));
                sent = safe;
            }
            if (p.signal?.aborted) break;
            if (p.maxTokens > 0 && tokens.length >= p.maxTokens) {
                finishReason = "length";
                break;
            }
            // llama-server stops a slot whose context is full (context shift
            // is off by default) and calls it "length".
            if (seq.nextTokenIndex + 1 >= this.slotContext) {
                finishReason = "length";
                break;
            }
        }
        const end = performance.now();
        if (first === 0) first = end;
        // Every sampled token counts, the end-of-generation one included.
        const generated = tokens.length + (eog ? 1 : 0);
        if (p.onText && text.length > sent) p.onText(text.slice(sent));
        const promptMs = first - t0;
        // llama.cpp times generation in whole microseconds, at least one.
        const predictedMs = Math.max(0.001, end - first);
        this.stats.promptTokens += input.length;
        this.stats.promptMs += promptMs;
        this.stats.predictedTokens += generated;
        this.stats.predictedMs += predictedMs;
        this.stats.decodes += 1;
        return {
            text,
            finishReason,
            promptTokens: input.length,
            completionTokens: generated,
            timings: timings(input.length, promptMs, generated, predictedMs),
        };
    }

    // embed returns one L2-normalised vector per input, as llama-server's
    // /v1/embeddings does by default.
    async embed(inputs) {
        if (this.pooling === 0) {
            throw new HTTPError(400, "Pooling type 'none' is not OAI compatible. Please use a different pooling type",
                "invalid_request_error");
        }
        const batch = Math.min(this.opts.ubatchSize ?? 512, this.opts.batchSize ?? 2048);
        const tokenized = inputs.map((x) => (Array.isArray(x) ? x.slice() : this.tokens(x, { eos: true })));
        for (const t of tokenized) {
            if (t.length > batch) {
                throw new HTTPError(500, `input (${t.length} tokens) is too large to process. increase the physical batch size (current batch size: ${batch})`, "server_error");
            }
        }
        const ctx = await this.slots.acquire();
        try {
            const out = [];
            for (const t of tokenized) {
                const { vector } = await ctx.getEmbeddingFor(t);
                let norm = 0;
                for (const v of vector) norm += v * v;
                norm = Math.sqrt(norm);
                out.push({ vector: vector.map((v) => (norm > 0 ? v / norm : 0)), tokens: t.length });
            }
            return out;
        } finally {
            this.slots.release(ctx);
        }
    }

    async dispose() {
        // Each step on its own: a half-built engine still lets go of the rest.
        for (const d of [this.embedder, this.context, this.model, this.llama]) {
            if (d) await d.dispose().catch(() => {});
        }
    }
}

// firstStop is where the earliest stop text begins in text, or -1.
function firstStop(text, stops) {
    let at = -1;
    for (const s of stops) {
        const i = text.indexOf(s);
        if (i >= 0 && (at < 0 || i < at)) at = i;
    }
    return at;
}

// partialStop is how many characters at the end of text could begin a stop
// text.
function partialStop(text, stops) {
    let longest = 0;
    for (const s of stops) {
        for (let n = Math.min(s.length - 1, text.length); n > longest; n--) {
            if (text.endsWith(s.slice(0, n))) {
                longest = n;
                break;
            }
        }
    }
    return longest;
}

function timings(promptN, promptMs, predictedN, predictedMs) {
    return {
        cache_n: 0,
        prompt_n: promptN,
        prompt_ms: promptMs,
        prompt_per_token_ms: promptN > 0 ? promptMs / promptN : 0,
        prompt_per_second: promptMs > 0 ? (promptN / promptMs) * 1000 : 0,
        predicted_n: predictedN,
        predicted_ms: predictedMs,
        predicted_per_token_ms: predictedN > 0 ? predictedMs / predictedN : 0,
        predicted_per_second: (predictedN / predictedMs) * 1000,
    };
}
