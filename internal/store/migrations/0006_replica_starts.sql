-- Each start of a replica's engine that became ready (package fleet), with
-- the memory it was placed by beside the memory it was measured to use:
-- how wrong the estimates are, kept over time rather than only while the
-- replica runs. rss_bytes is the largest resident size seen in that run.
CREATE TABLE replica_starts (
	id             INTEGER PRIMARY KEY,
	replica        TEXT NOT NULL,
	model          TEXT NOT NULL,
	file           TEXT NOT NULL,
	context        INTEGER NOT NULL,
	slots          INTEGER NOT NULL,
	estimate_bytes INTEGER NOT NULL,
	rss_bytes      INTEGER NOT NULL,
	started_at     TEXT NOT NULL,
	ready_at       TEXT NOT NULL
);
CREATE INDEX replica_starts_newest ON replica_starts (id DESC);
