-- SQLite's JSON functions that the store's shared SQL uses, for PostgreSQL: the columns hold
-- JSON as text in both databases. Paths are SQLite's simple ones ('$', '$.a', '$.a.b').
-- Made (or replaced) at every start, under the migration lock; they are not part of the
-- versioned schema.

-- The value at `path`: text for a string, JSON text for an object or array, NULL if none.
CREATE OR REPLACE FUNCTION json_extract(doc text, path text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT (doc::jsonb) #>> string_to_array(substr(path, 3), '.') $$;

-- The elements of the array at `path` as rows with one column `value`, like SQLite's
-- table-valued json_each over an array.
CREATE OR REPLACE FUNCTION json_each(doc text, path text) RETURNS TABLE (value text)
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT e #>> '{}' FROM jsonb_array_elements(
        CASE WHEN jsonb_typeof((doc::jsonb) #> string_to_array(substr(path, 3), '.')) = 'array'
             THEN (doc::jsonb) #> string_to_array(substr(path, 3), '.')
             ELSE '[]'::jsonb END) AS e
$$;

-- A JSON array of two integers, as text.
CREATE OR REPLACE FUNCTION json_array(a bigint, b bigint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT json_build_array(a, b)::text $$;
