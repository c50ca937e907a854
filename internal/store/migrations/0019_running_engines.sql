-- The local engines running now (package fleet, engines.go), kept so that
-- the next modelserve on this data folder adopts them rather than loading
-- each model again: an engine outlives the modelserve that started it.
-- pid, start_ticks (field 22 of /proc/PID/stat), exe (/proc/PID/exe) and
-- uid together name its process: a pid alone may be another's by now.
-- args and env are what it was started with, to start it again after a
-- crash as it was; env holds its key, as key does.
CREATE TABLE running_engines (
	replica     TEXT PRIMARY KEY,
	model       TEXT NOT NULL,
	profile     TEXT NOT NULL,
	fingerprint TEXT NOT NULL,
	node        TEXT NOT NULL,
	engine      TEXT NOT NULL,
	pid         INTEGER NOT NULL,
	start_ticks INTEGER NOT NULL,
	exe         TEXT NOT NULL,
	uid         INTEGER NOT NULL,
	endpoint    TEXT NOT NULL,
	key         TEXT NOT NULL,
	mem_bytes   INTEGER NOT NULL,
	cards       TEXT NOT NULL,
	threads     INTEGER NOT NULL,
	pool        INTEGER NOT NULL,
	slots       INTEGER NOT NULL,
	weights     TEXT NOT NULL,
	args        TEXT NOT NULL,
	env         TEXT NOT NULL,
	startup_ms  INTEGER NOT NULL,
	started_at  TEXT NOT NULL,
	ready_at    TEXT
);
