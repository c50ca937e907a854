-- New weights on the branch a served model came from (package updates).
--
-- An update is one model's branch having moved from the commit the model
-- runs (old_commit) to one whose files the model uses differ (new_commit):
-- files is JSON, each changed file's path with its old and new size and
-- sha256, or gone when the new commit no longer has it. The unique key
-- makes the same move, noticed twice or after a restart, one update. state
-- is available when noticed; later ones (running, promoted, rolled_back,
-- dismissed) are what acting on it will write.
CREATE TABLE updates (
	id         INTEGER PRIMARY KEY,
	model      TEXT NOT NULL,
	repo       TEXT NOT NULL,
	ref        TEXT NOT NULL,
	old_commit TEXT NOT NULL,
	new_commit TEXT NOT NULL,
	files      TEXT NOT NULL,
	noticed_at TEXT NOT NULL,
	state      TEXT NOT NULL DEFAULT 'available',
	UNIQUE (model, old_commit, new_commit)
);
CREATE INDEX updates_model ON updates (model, id DESC);

-- What the watcher knows of each model: its own interval between checks
-- when it has one (NULL: the server's default; 0: never), and its last
-- check — the commit the model ran then (a model served again since is
-- not the one checked), when, the branch's head it found, and the result
-- (up_to_date, update_available or failed, with the sentence).
CREATE TABLE update_checks (
	model            TEXT PRIMARY KEY,
	interval_seconds INTEGER CHECK (interval_seconds IS NULL OR interval_seconds >= 0),
	served_commit    TEXT NOT NULL DEFAULT '',
	checked_at       TEXT NOT NULL DEFAULT '',
	head_commit      TEXT NOT NULL DEFAULT '',
	result           TEXT NOT NULL DEFAULT '',
	error            TEXT NOT NULL DEFAULT '',
	update_id        INTEGER REFERENCES updates (id) ON DELETE SET NULL
);
