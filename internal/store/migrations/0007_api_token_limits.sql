-- What an API token may do. scope 'all' is the console's JSON API and the
-- gateway (/v1/...); 'gateway' is the gateway alone, for a client that should
-- call models and nothing else. models, when not empty, is the comma-separated
-- list of the catalog names (or aliases) the token may call through the
-- gateway; empty is every model. Tokens made before this migration keep
-- doing what they did: everything.
ALTER TABLE api_tokens ADD COLUMN scope TEXT NOT NULL DEFAULT 'all' CHECK (scope IN ('all', 'gateway'));
ALTER TABLE api_tokens ADD COLUMN models TEXT NOT NULL DEFAULT '';
