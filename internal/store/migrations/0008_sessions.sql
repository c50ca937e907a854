-- Console sessions kept on the server (package auth). The cookie carries a
-- random secret; only its SHA-256 is kept here, so a copy of the database
-- signs nobody in. A row is the session: deleting it (sign-out, a password
-- change, revoking) ends every copy of the cookie at once, which a session
-- kept only in the cookie could not do. id is a short public name for the
-- row, to list and revoke it by; it lets nobody in.
--
-- Times are Unix seconds, so that "expired" is a comparison of numbers.
-- A user's removal removes their sessions (ON DELETE CASCADE).
CREATE TABLE sessions (
	id          TEXT PRIMARY KEY,
	secret_hash TEXT NOT NULL UNIQUE,
	user        TEXT NOT NULL COLLATE NOCASE REFERENCES users (name) ON DELETE CASCADE,
	created_at  INTEGER NOT NULL,
	last_seen   INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL,
	user_agent  TEXT NOT NULL DEFAULT '',
	address     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX sessions_user ON sessions (user);

-- The keys that sign the session cookie lived in the meta table: anyone who
-- could read the database could make a cookie of their own. They now live
-- in a key file beside the database (0600), or come from a secret given at
-- start; an old database must not keep them.
DELETE FROM meta WHERE key = 'session_keys';
