-- Eval suites and their runs (package evals).
--
-- A model's suite is the JSON the API's PUT took, checked and written out
-- again in one layout (cases), with who set it and when. It is keyed by
-- the model's name and outlives the model: removing a model from the
-- catalog keeps its suite and its runs, so a model served again under the
-- same name is held to the same suite, and its history stays readable.
-- A suite emptied through the API is deleted.
CREATE TABLE eval_suites (
	model      TEXT PRIMARY KEY,
	cases      TEXT NOT NULL,
	updated_at TEXT NOT NULL,
	updated_by TEXT NOT NULL DEFAULT ''
);

-- A run of a model's suite against a target (the catalog name asked: the
-- model itself, or a version served beside it), with the commit the
-- target ran and the digest of the suite that ran, so runs of two versions
-- compare. state is running while its cases are asked, then done (every
-- case judged) or failed (it could not finish: error says why in a
-- sentence). A run left running by a modelserve that stopped is failed at
-- the next start. passed counts the results that passed so far; total is
-- the suite's cases.
CREATE TABLE eval_runs (
	id            INTEGER PRIMARY KEY,
	model         TEXT NOT NULL,
	target        TEXT NOT NULL,
	target_commit TEXT NOT NULL DEFAULT '',
	suite_digest  TEXT NOT NULL,
	started_at    TEXT NOT NULL,
	finished_at   TEXT NOT NULL DEFAULT '',
	state         TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed')),
	passed        INTEGER NOT NULL DEFAULT 0,
	total         INTEGER NOT NULL,
	error         TEXT NOT NULL DEFAULT ''
);
CREATE INDEX eval_runs_model ON eval_runs (model, id DESC);
CREATE INDEX eval_runs_running ON eval_runs (state) WHERE state = 'running';

-- Each case's verdict in a run, in the suite's order: the answer (cut to
-- 500 characters), the reason a failed case failed, and how long the
-- request took.
CREATE TABLE eval_results (
	run_id     INTEGER NOT NULL REFERENCES eval_runs (id) ON DELETE CASCADE,
	position   INTEGER NOT NULL,
	name       TEXT NOT NULL,
	kind       TEXT NOT NULL,
	pass       INTEGER NOT NULL CHECK (pass IN (0, 1)),
	answer     TEXT NOT NULL,
	reason     TEXT NOT NULL DEFAULT '',
	latency_ms INTEGER NOT NULL,
	PRIMARY KEY (run_id, position)
);
