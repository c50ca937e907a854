-- Each minute of what the gateway and the fleet measured (package
-- rollup), for the console's charts of the last hour and their JSON
-- twins: kept across a restart, and pruned to the newest day as each
-- minute is written. minute is the Unix second the minute began.
CREATE TABLE model_minutes (
	model             TEXT NOT NULL,
	minute            INTEGER NOT NULL,
	requests          INTEGER NOT NULL,
	p50_ms            REAL NOT NULL,
	tokens_per_second REAL NOT NULL,
	PRIMARY KEY (model, minute)
) WITHOUT ROWID;
CREATE INDEX model_minutes_minute ON model_minutes (minute);
CREATE TABLE node_minutes (
	node           TEXT NOT NULL,
	minute         INTEGER NOT NULL,
	promised_bytes INTEGER NOT NULL,
	measured_bytes INTEGER NOT NULL,
	free_bytes     INTEGER NOT NULL,
	PRIMARY KEY (node, minute)
) WITHOUT ROWID;
CREATE INDEX node_minutes_minute ON node_minutes (minute);
