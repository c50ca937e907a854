// errors.mjs holds the error every route answers with, in llama-server's
// shape: {"error":{"code","message","type", ...}}.

// HTTPError is an answer llama-server would give: its status code, message
// and error type (invalid_request_error, authentication_error,
// not_found_error, server_error, not_supported_error, unavailable_error,
// exceed_context_size_error), and any extra fields it adds.
export class HTTPError extends Error {
    constructor(code, message, type, extra = {}) {
        super(message);
        this.code = code;
        this.type = type;
        this.extra = extra;
    }
}
