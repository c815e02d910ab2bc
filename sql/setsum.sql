--
-- setsum: the multiset checksum of src/cluster/setsum.c (cluster mode
-- checks with it that a shard's rows arrived whole on another node).
--
-- The functions are made here, in a scratch schema, from the library's
-- symbols, the way the extension script declares them in schema silo: this
-- file tests the C code whatever version of the extension is installed.
--
CREATE SCHEMA setsum_test;

CREATE FUNCTION setsum_test.setsum_accum(internal, text) RETURNS internal
AS '$libdir/silo', 'silo_setsum_accum' LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION setsum_test.setsum_combine(internal, internal) RETURNS internal
AS '$libdir/silo', 'silo_setsum_combine' LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION setsum_test.setsum_serialize(internal) RETURNS bytea
AS '$libdir/silo', 'silo_setsum_serialize' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION setsum_test.setsum_deserialize(bytea, internal) RETURNS internal
AS '$libdir/silo', 'silo_setsum_deserialize' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION setsum_test.setsum_final(internal) RETURNS text
AS '$libdir/silo', 'silo_setsum_final' LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
CREATE AGGREGATE setsum_test.setsum(text) (
	SFUNC = setsum_test.setsum_accum, STYPE = internal, SSPACE = 32,
	FINALFUNC = setsum_test.setsum_final, COMBINEFUNC = setsum_test.setsum_combine,
	SERIALFUNC = setsum_test.setsum_serialize, DESERIALFUNC = setsum_test.setsum_deserialize,
	PARALLEL = SAFE);
CREATE FUNCTION setsum_test.setsum_add(text, text) RETURNS text
AS '$libdir/silo', 'silo_setsum_add' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION setsum_test.setsum_sub(text, text) RETURNS text
AS '$libdir/silo', 'silo_setsum_sub' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION setsum_test.setsum_item(text) RETURNS text
AS '$libdir/silo', 'silo_setsum_item' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

SET search_path = setsum_test, public;

--
-- Golden vectors.  A setsum is 8 lanes of 8 hex digits, lane 0 first; an
-- item's lane i is bytes 4i..4i+3 of its SHA-256, read little-endian,
-- modulo the i-th prime below 2^32.  These values were computed
-- independently (Python's hashlib and the primes); a change of hash,
-- primes, lane order or format changes them.
--

-- the empty multiset: no rows, and only NULL items (NULLs are skipped)
SELECT setsum(x) AS no_rows FROM (SELECT 'a' WHERE false) s(x);
SELECT setsum(x) AS only_nulls FROM (VALUES (NULL::text), (NULL)) v(x);
-- one item: sha256('') = e3b0c442 98fc1c14 ..., so lane 0 is 0x42c4b0e3
SELECT setsum_item('') AS empty_string;
SELECT setsum_item('a') AS a, setsum(x) AS a_as_aggregate FROM (VALUES ('a')) v(x);
-- two items, in either order; a NULL among them changes nothing
SELECT setsum(x ORDER BY x) AS a_b, setsum(x ORDER BY x DESC) AS b_a
  FROM (VALUES ('a'), ('b'), (NULL)) v(x);
-- a duplicate counts: {a, b, b} is not {a, b}
SELECT setsum(x) AS a_b_b, setsum(x) <> setsum_item('a') AS differs_from_a
  FROM (VALUES ('a'), ('b'), ('b')) v(x);
-- subtraction wraps modulo each prime: 0 - a is (p_i - lane_i) per lane
SELECT setsum_sub(repeat('0', 64), setsum_item('a')) AS zero_minus_a;

--
-- Algebra
--
SELECT setsum_add(setsum_item('a'), setsum_item('b')) = setsum(x) AS add_is_union,
	   setsum_add(setsum_add(setsum_item('a'), setsum_item('b')), setsum_item('b')) =
		   '4051de465f6f8ddb7dd0d5a1b73fe662f9e501bd06a825abe35468e8f54a2912' AS add_counts_duplicates,
	   setsum_sub(setsum_add(setsum_item('a'), setsum_item('b')), setsum_item('b')) = setsum_item('a')
		   AS a_plus_b_minus_b,
	   setsum_sub(setsum_item('a'), setsum_item('a')) = repeat('0', 64) AS a_minus_a,
	   setsum_add(setsum_item('a'), repeat('0', 64)) = setsum_item('a') AS zero_is_neutral,
	   setsum_add(setsum_sub(repeat('0', 64), setsum_item('a')), setsum_item('a')) = repeat('0', 64)
		   AS inverse
  FROM (VALUES ('a'), ('b')) v(x);
-- the largest value of each lane plus 1 wraps to zero
SELECT setsum_add('fffffffaffffffeeffffffbeffffff9cffffff94ffffff78ffffff66ffffff46',
				  '0000000100000001000000010000000100000001000000010000000100000001') AS max_plus_one;
-- strict: a NULL argument gives NULL
SELECT setsum_add(NULL, repeat('0', 64)) IS NULL AS add_null,
	   setsum_sub(repeat('0', 64), NULL) IS NULL AS sub_null,
	   setsum_item(NULL) IS NULL AS item_null;
-- input may be upper case; output is always lower case
SELECT setsum_add(upper(setsum_item('a')), repeat('0', 64)) AS from_upper_case;

--
-- Rows as text: a table of 10,000 rows, summed whole, in parts, and with
-- rows removed
--
CREATE TABLE setsum_test.shard_rows AS
	SELECT i AS id, md5(i::text) AS h, 'tenant-' || i % 7 AS tenant
	  FROM generate_series(1, 10000) i;
SELECT t::text AS first_row_text FROM setsum_test.shard_rows t WHERE id = 1;
-- golden: the whole table
SELECT setsum(t::text) AS whole FROM setsum_test.shard_rows t;
-- order does not matter
SELECT setsum(t::text ORDER BY id DESC) = setsum(t::text ORDER BY h) AS order_independent
  FROM setsum_test.shard_rows t;
-- two halves added give the whole (the part copied before a pause plus the
-- tail written during it)
SELECT setsum_add((SELECT setsum(t::text) FROM setsum_test.shard_rows t WHERE id <= 5000),
				  (SELECT setsum(t::text) FROM setsum_test.shard_rows t WHERE id > 5000)) =
	   (SELECT setsum(t::text) FROM setsum_test.shard_rows t) AS halves_make_the_whole;
-- the setsums of the tenants, added one by one, give the whole
SELECT (WITH RECURSIVE parts AS (
			SELECT row_number() OVER (ORDER BY tenant) AS n, setsum(t::text) AS s
			  FROM setsum_test.shard_rows t GROUP BY tenant),
		folded AS (
			SELECT 0::bigint AS n, repeat('0', 64) AS s
			UNION ALL
			SELECT p.n, setsum_add(f.s, p.s) FROM folded f JOIN parts p ON p.n = f.n + 1)
		SELECT s FROM folded ORDER BY n DESC LIMIT 1) =
	   (SELECT setsum(t::text) FROM setsum_test.shard_rows t) AS tenants_make_the_whole;
-- rows deleted during a copy are subtracted
CREATE TEMP TABLE before_delete AS SELECT setsum(t::text) AS s FROM setsum_test.shard_rows t;
CREATE TEMP TABLE deleted AS SELECT setsum(t::text) AS s FROM setsum_test.shard_rows t WHERE id % 10 = 3;
DELETE FROM setsum_test.shard_rows WHERE id % 10 = 3;
SELECT setsum_sub(b.s, d.s) = (SELECT setsum(t::text) FROM setsum_test.shard_rows t) AS subtracting_deleted_rows
  FROM before_delete b, deleted d;
INSERT INTO setsum_test.shard_rows SELECT i, md5(i::text), 'tenant-' || i % 7
  FROM generate_series(3, 10000, 10) i;
SELECT setsum(t::text) = (SELECT s FROM before_delete) AS restored
  FROM setsum_test.shard_rows t;
-- a row's text may hold NULL fields, quotes and commas
SELECT x AS row_text, setsum_item(x) = (SELECT setsum(y) FROM (VALUES (x)) v(y)) AS row_type_works
  FROM (SELECT ROW(1, NULL::text, 'say "hi"', 'a,b')::text AS x) s;

--
-- Grouping and parallel plans give the same values
--
SET enable_hashagg = off;
CREATE TEMP TABLE sorted_groups AS SELECT tenant, setsum(t::text) AS s FROM setsum_test.shard_rows t GROUP BY tenant;
RESET enable_hashagg;
SET enable_sort = off;
EXPLAIN (COSTS OFF) SELECT tenant, setsum(t::text) FROM setsum_test.shard_rows t GROUP BY tenant;
CREATE TEMP TABLE hashed_groups AS SELECT tenant, setsum(t::text) AS s FROM setsum_test.shard_rows t GROUP BY tenant;
RESET enable_sort;
SELECT count(*) AS groups, count(*) FILTER (WHERE h.s IS DISTINCT FROM g.s) AS differing
  FROM sorted_groups g FULL JOIN hashed_groups h USING (tenant);

-- a parallel plan: partial states are serialized, combined, deserialized
SET max_parallel_workers_per_gather = 2;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
ALTER TABLE setsum_test.shard_rows SET (parallel_workers = 2);
EXPLAIN (COSTS OFF) SELECT setsum(t::text) FROM setsum_test.shard_rows t;
SELECT setsum(t::text) AS whole_in_parallel FROM setsum_test.shard_rows t;
RESET max_parallel_workers_per_gather;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;

-- an error in the middle of an aggregate leaves the next one correct
SELECT test_helpers.sqlstate_of('SELECT setsum_test.setsum(CASE WHEN id = 5000 THEN (1 / 0)::text ELSE t::text END)
								   FROM setsum_test.shard_rows t') AS error_midway;
SELECT setsum(t::text) AS whole_again FROM setsum_test.shard_rows t;

--
-- Bad input: 22023, naming the argument, and a detail with the fault
--
CREATE FUNCTION setsum_test.fault(sql text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	detail text;
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
	RETURN SQLSTATE || ': ' || SQLERRM || ' -- ' || detail;
END
$$;
SELECT name, setsum_test.fault(sql) AS outcome FROM (VALUES
	('too short', 'SELECT setsum_test.setsum_add(''abc'', repeat(''0'', 64))'),
	('too long', 'SELECT setsum_test.setsum_add(repeat(''0'', 64), repeat(''0'', 65))'),
	('empty', 'SELECT setsum_test.setsum_sub('''', repeat(''0'', 64))'),
	('not hex', 'SELECT setsum_test.setsum_sub(repeat(''0'', 10) || ''g'' || repeat(''0'', 53), repeat(''0'', 64))'),
	('leading space', 'SELECT setsum_test.setsum_add('' '' || repeat(''0'', 63), repeat(''0'', 64))'),
	('64 characters, 65 bytes', 'SELECT setsum_test.setsum_add(repeat(''0'', 64), repeat(''0'', 20) || ''é'' || repeat(''0'', 43))'),
	('62 characters, 64 bytes', 'SELECT setsum_test.setsum_add(repeat(''0'', 60) || ''éé'', repeat(''0'', 64))'),
	-- a lane equal to its prime is no setsum (lane 0's prime is 0xfffffffb)
	('lane 0 at its prime', 'SELECT setsum_test.setsum_add(''fffffffb'' || repeat(''0'', 56), repeat(''0'', 64))'),
	('lane 0 below its prime', 'SELECT setsum_test.setsum_add(''fffffffa'' || repeat(''0'', 56), repeat(''0'', 64))'),
	-- lane 7's prime is 0xffffff47
	('lane 7 above its prime', 'SELECT setsum_test.setsum_sub(repeat(''0'', 64), repeat(''0'', 56) || ''ffffff48'')')
	) v(name, sql);
-- the message, its detail and hint
SELECT setsum_add('fffffffb' || repeat('0', 56), repeat('0', 64));
SELECT setsum_add(repeat('0', 64), 'xyz');

RESET search_path;
SET client_min_messages = warning;
DROP SCHEMA setsum_test CASCADE;
RESET client_min_messages;
