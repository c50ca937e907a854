// probe.mjs loads a GGUF file in real llama.cpp (through node-llama-cpp) and
// either generates a few tokens or, with --embedding, embeds a sentence. It
// prints one JSON object on stdout. When llama.cpp refuses the file, it
// prints llama.cpp's own error lines on stderr and exits 1, so a test can
// match the engine's words rather than a wrapper's.
//
//   node probe.mjs MODEL [--embedding] [--ctx N] [--sequences N]
//                        [--threads N] [--tokens N] [--prompt TEXT]
//
// --threads defaults to 1. Left to itself llama.cpp takes every core, and on
// a 2-core machine that made a tiny model 300 times slower; 2 threads there
// were still 250 times slower than 1 (8 against 2000 tokens a second), as
// the threads wait on each other for work a tiny model does not have.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

function parseArgs(argv) {
    const opts = { embedding: false, ctx: 512, sequences: 1, threads: 1, tokens: 8, prompt: "the world" };
    const rest = [];
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        const value = () => {
            if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
            return argv[++i];
        };
        switch (a) {
            case "--embedding": opts.embedding = true; break;
            case "--ctx": opts.ctx = Number(value()); break;
            case "--sequences": opts.sequences = Number(value()); break;
            case "--threads": opts.threads = Number(value()); break;
            case "--tokens": opts.tokens = Number(value()); break;
            case "--prompt": opts.prompt = value(); break;
            default:
                if (a.startsWith("--")) throw new Error(`unknown flag ${a}`);
                rest.push(a);
        }
    }
    if (rest.length !== 1) throw new Error("usage: node probe.mjs MODEL [--embedding] [--ctx N] [--sequences N] [--threads N] [--tokens N] [--prompt TEXT]");
    opts.model = rest[0];
    return opts;
}

async function main() {
    const opts = parseArgs(process.argv.slice(2));
    // llama.cpp's own log lines are kept, not printed: on a refusal they are
    // the reason, and otherwise they are noise on a test's output.
    const logs = [];
    const started = performance.now();
    const llama = await getLlama({
        gpu: false,
        build: "never",
        progressLogs: false,
        logLevel: LlamaLogLevel.warn,
        logger: (level, message) => logs.push(String(message).trimEnd()),
    });
    const engineMs = performance.now() - started;
    let model;
    try {
        model = await llama.loadModel({ modelPath: opts.model });
    } catch (err) {
        const engine = logs.filter((l) => /error|fail|unknown|invalid/i.test(l));
        for (const line of engine) process.stderr.write(line + "\n");
        process.stderr.write(String(err && err.message ? err.message : err) + "\n");
        process.exit(1);
    }
    const out = {
        trainContextSize: model.trainContextSize,
        embeddingVectorSize: model.embeddingVectorSize,
        engineMs: Math.round(engineMs),
        loadMs: Math.round(performance.now() - started - engineMs),
    };

    if (opts.embedding) {
        const ctx = await model.createEmbeddingContext({ contextSize: opts.ctx, threads: opts.threads });
        const t0 = performance.now();
        const embedding = await ctx.getEmbeddingFor(opts.prompt);
        out.vectorLength = embedding.vector.length;
        out.finite = embedding.vector.every((v) => Number.isFinite(v));
        out.embedMs = Math.round(performance.now() - t0);
        await ctx.dispose();
    } else {
        const ctx = await model.createContext({
            contextSize: opts.ctx,
            sequences: opts.sequences,
            threads: opts.threads,
        });
        out.contextSize = ctx.contextSize;
        // The sequence is driven token by token rather than through
        // LlamaCompletion, whose stop heuristics ended the tiny models'
        // replies after a handful of tokens: this generates exactly --tokens
        // unless llama.cpp itself samples an end-of-generation token.
        const sequence = ctx.getSequence();
        const input = [model.tokens.bos, ...model.tokenize(opts.prompt)].filter((t) => t != null);
        const generated = [];
        let stopReason = "maxTokens";
        const t0 = performance.now();
        if (opts.tokens > 0) {
            // Sampled with a fixed seed rather than greedily, so that a reply
            // is the same on every run but not one token repeated.
            for await (const token of sequence.evaluate(input, { temperature: 0.8, seed: 42, yieldEogToken: true })) {
                if (model.isEogToken(token)) {
                    stopReason = "eogToken";
                    break;
                }
                generated.push(token);
                if (generated.length >= opts.tokens) break;
            }
        }
        const secs = (performance.now() - t0) / 1000;
        out.promptTokens = input.length;
        out.tokens = generated.length;
        out.text = model.detokenize(generated);
        out.stopReason = stopReason;
        out.tokensPerSecond = secs > 0 ? Math.round(generated.length / secs) : 0;
        await ctx.dispose();
    }
    await model.dispose();
    await llama.dispose();
    process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((err) => {
    process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
    process.exit(2);
});
