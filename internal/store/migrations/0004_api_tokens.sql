-- Bearer tokens for scripts. Only a hash is kept: a stolen database does not
-- give anyone a token that works.
CREATE TABLE api_tokens (
	name       TEXT PRIMARY KEY,
	hash       TEXT NOT NULL UNIQUE,
	created_at TEXT NOT NULL,
	last_used  TEXT
);
