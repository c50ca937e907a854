-- The versions of each model (catalog/versions.go): every set of weights a
-- catalog name has run, or tried as a canary, by commit. The catalog
-- writes them in the transaction that changes the entry, so the entry and
-- its versions never disagree. state is current (what the name serves),
-- canary (run beside it, judged), retired (served before a newer one),
-- rolled_back (a canary that did worse) or promoted is never kept: a
-- promoted canary becomes current. reason says why a version ended.
-- files is the entry's origin files as JSON, profile its first profile.
-- A model removed from the catalog keeps its history.
CREATE TABLE model_versions (
	id         INTEGER PRIMARY KEY,
	model      TEXT NOT NULL,
	commit_sha TEXT NOT NULL,
	ref        TEXT NOT NULL DEFAULT '',
	files      TEXT NOT NULL DEFAULT '[]',
	profile    TEXT NOT NULL DEFAULT '{}',
	state      TEXT NOT NULL,
	reason     TEXT NOT NULL DEFAULT '',
	created_at TEXT NOT NULL,
	ended_at   TEXT NOT NULL DEFAULT '',
	UNIQUE (model, commit_sha)
);
CREATE INDEX model_versions_model ON model_versions (model, id DESC);

-- An update is served the way the newest job that served its model was:
-- found by model, newest first.
CREATE INDEX jobs_model ON jobs (model, started DESC);
