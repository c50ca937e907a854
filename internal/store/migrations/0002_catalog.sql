-- The catalog of served models (package catalog).
--
-- A model is one row: its name, the columns something filters or shows in a
-- list, and the rest of its definition as JSON in spec, so a new field of
-- catalog.Model needs no migration.
CREATE TABLE models (
	name     TEXT PRIMARY KEY,
	class    TEXT NOT NULL DEFAULT '',
	role     TEXT NOT NULL DEFAULT '',
	added_by TEXT NOT NULL DEFAULT '',
	added_at TEXT NOT NULL,
	spec     TEXT NOT NULL
);

-- Other names a model answers to. The primary key keeps an alias to one
-- model; the cascade takes a model's aliases with it when it is removed.
CREATE TABLE aliases (
	alias    TEXT PRIMARY KEY,
	model    TEXT NOT NULL REFERENCES models (name) ON DELETE CASCADE,
	position INTEGER NOT NULL
);
CREATE INDEX aliases_model ON aliases (model, position);

-- A request names a model by its name or by an alias, so the two share one
-- namespace. The catalog checks this before writing and says who holds a
-- name; these keep the database itself from ever holding an ambiguous one.
CREATE TRIGGER aliases_not_a_model_name BEFORE INSERT ON aliases
WHEN EXISTS (SELECT 1 FROM models WHERE name = NEW.alias)
BEGIN
	SELECT RAISE(ABORT, 'an alias may not be the name of a model');
END;

CREATE TRIGGER models_name_not_an_alias BEFORE INSERT ON models
WHEN EXISTS (SELECT 1 FROM aliases WHERE alias = NEW.name)
BEGIN
	SELECT RAISE(ABORT, 'a model name may not be an alias of another model');
END;
