// args.mjs reads llama-server's command line, the part of it modelserve
// passes. It fails the way llama.cpp's common_params_parse fails: an unknown
// flag prints "error: invalid argument: <flag>", a missing or malformed value
// prints "error while handling argument ...", and the process exits 1. A
// double that quietly accepted anything would hide a wrong flag until the
// real engine met it.

// ArgError carries the line llama.cpp would print before exiting 1.
export class ArgError extends Error {}

const missingValue = (flag) =>
    new ArgError(`error while handling argument "${flag}": expected value for argument`);

function integer(flag, raw) {
    // llama.cpp converts with std::stoi, which refuses text without a
    // leading number; "12abc" would pass stoi, but nobody means it.
    if (!/^[+-]?\d+$/.test(raw)) {
        throw new ArgError(`error while handling argument "${flag}": stoi`);
    }
    return Number(raw);
}

function oneOf(flag, raw, allowed) {
    if (!allowed.includes(raw)) {
        throw new ArgError(`error while handling argument "${flag}": unknown value for ${flag}: '${raw}'`);
    }
    return raw;
}

// defaults are llama-server's own where they matter to a client:
// ctx-size 0 takes the model's trained context, parallel -1 is "auto"
// (four slots sharing one unified cache), and the HTTP server listens on
// 127.0.0.1:8080.
export function defaults() {
    return {
        model: "",
        mmproj: "",
        host: "127.0.0.1",
        port: 8080,
        ctxSize: 0,
        parallel: -1,
        embedding: false,
        batchSize: null,
        ubatchSize: null,
        cacheRam: 8192,
        gpuLayers: "auto",
        threads: null,
        apiKeys: [],
        alias: "",
        fit: "on",
        version: false,
        jinja: true,
        webui: true,
        metrics: false,
        logDisable: false,
        flashAttn: "auto",
    };
}

// parseArgs turns argv (without node and the script) into options, or
// throws ArgError.
export function parseArgs(argv) {
    const o = defaults();
    for (let i = 0; i < argv.length; i++) {
        const flag = argv[i];
        const value = () => {
            if (i + 1 >= argv.length) throw missingValue(flag);
            return argv[++i];
        };
        switch (flag) {
            case "-m": case "--model": o.model = value(); break;
            case "-mm": case "--mmproj": o.mmproj = value(); break;
            case "--host": o.host = value(); break;
            case "--port": o.port = integer(flag, value()); break;
            case "-c": case "--ctx-size": o.ctxSize = integer(flag, value()); break;
            case "-np": case "--parallel": o.parallel = integer(flag, value()); break;
            case "--embedding": case "--embeddings": o.embedding = true; break;
            case "-b": case "--batch-size": o.batchSize = integer(flag, value()); break;
            case "-ub": case "--ubatch-size": o.ubatchSize = integer(flag, value()); break;
            case "-cram": case "--cache-ram": o.cacheRam = integer(flag, value()); break;
            case "-ngl": case "--gpu-layers": case "--n-gpu-layers": {
                const v = value();
                o.gpuLayers = v === "auto" || v === "all" ? v : integer(flag, v);
                break;
            }
            case "-t": case "--threads": o.threads = integer(flag, value()); break;
            case "--api-key":
                // llama-server takes a comma-separated list of keys.
                o.apiKeys.push(...value().split(",").filter((k) => k !== ""));
                break;
            case "-a": case "--alias": o.alias = value(); break;
            case "-fit": case "--fit": o.fit = oneOf(flag, value(), ["on", "off"]); break;
            case "--version": o.version = true; break;
            case "--jinja": o.jinja = true; break;
            case "--no-jinja": o.jinja = false; break;
            case "--no-webui": case "--no-ui": o.webui = false; break;
            case "--metrics": o.metrics = true; break;
            case "--log-disable": o.logDisable = true; break;
            case "-fa": case "--flash-attn": {
                // Newer builds take on|off|auto; older ones took the bare
                // flag. Accept both, and only those values.
                const next = argv[i + 1];
                if (next !== undefined && !next.startsWith("-")) {
                    o.flashAttn = oneOf(flag, value(), ["on", "off", "auto"]);
                } else {
                    o.flashAttn = "on";
                }
                break;
            }
            default:
                throw new ArgError(`error: invalid argument: ${flag}`);
        }
    }
    if (o.parallel === 0 || o.parallel < -1) {
        throw new ArgError(`error while handling argument "--parallel": n_parallel must be positive or -1 (auto)`);
    }
    if (o.ctxSize < 0) {
        throw new ArgError(`error while handling argument "--ctx-size": the context size cannot be negative`);
    }
    return o;
}
