-- How many jobs there are, kept by triggers (package jobs). Every page of
-- the jobs list says how many there are in all, and COUNT(*) reads the
-- whole of an index to say it: tens of milliseconds at a million jobs, on
-- every page and every redraw of a live list. A row kept as jobs come and
-- go answers at once. jobs are written by upsert, which fires the insert
-- trigger only when a row is new.
CREATE TABLE jobs_count (
	only INTEGER PRIMARY KEY CHECK (only = 1),
	n    INTEGER NOT NULL
);
INSERT INTO jobs_count (only, n) SELECT 1, COUNT(*) FROM jobs;
CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN
	UPDATE jobs_count SET n = n + 1;
END;
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN
	UPDATE jobs_count SET n = n - 1;
END;
