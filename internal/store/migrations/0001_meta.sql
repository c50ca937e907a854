-- Settings modelserve keeps for itself between starts (session keys, ...).
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value BLOB NOT NULL
);
