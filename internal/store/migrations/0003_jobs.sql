-- Jobs that serve a model (package jobs), and the steps each went through.
--
-- A job is written on every change, so that one the process was running
-- when it stopped is found here as 'running' and carried on from its step.
-- Times are Unix nanoseconds: they sort as numbers, which RFC 3339 text
-- with a varying number of fraction digits does not.
CREATE TABLE jobs (
	id                TEXT PRIMARY KEY,
	kind              TEXT NOT NULL,
	-- running, done, failed or cancelled.
	state             TEXT NOT NULL,
	-- The request as asked, JSON; requested_by and if_absent are the parts
	-- the API never shows but a resumed job still needs.
	request           TEXT NOT NULL,
	requested_by      TEXT NOT NULL DEFAULT '',
	if_absent         INTEGER NOT NULL DEFAULT 0,
	error             TEXT NOT NULL DEFAULT '',
	model             TEXT NOT NULL DEFAULT '',
	-- The commit the registry resolved the revision to: a resumed job reads
	-- the repository at it, not at wherever the branch has moved since.
	commit_sha        TEXT NOT NULL DEFAULT '',
	reply             TEXT NOT NULL DEFAULT '',
	tokens_per_second REAL NOT NULL DEFAULT 0,
	retry_of          TEXT NOT NULL DEFAULT '',
	-- The number of the job's last event, so a watcher that reconnects can
	-- say which it saw.
	seq               INTEGER NOT NULL DEFAULT 0,
	started           INTEGER NOT NULL,
	finished          INTEGER
);
CREATE INDEX jobs_newest ON jobs (started DESC, id DESC);
CREATE INDEX jobs_running ON jobs (state) WHERE state = 'running';

-- One row per step, in the order the job reached them. The cascade takes a
-- job's steps with it.
CREATE TABLE job_steps (
	job_id      TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
	position    INTEGER NOT NULL,
	name        TEXT NOT NULL,
	state       TEXT NOT NULL,
	detail      TEXT NOT NULL DEFAULT '',
	at          INTEGER NOT NULL,
	bytes_done  INTEGER NOT NULL DEFAULT 0,
	bytes_total INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (job_id, position)
);
