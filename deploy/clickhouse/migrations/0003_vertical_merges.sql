-- agl-stream schema, version 3: merge the wide tables column by column.
--
-- A horizontal merge reads every column of every source part at once, block by block. For spans
-- (~4 KB of attributes per row) and triplets (token-id arrays) that made background merges the
-- largest user of the sinks' memory: with the embedded engine, ClickHouse's tracked memory peaked
-- near 250 MB while the sinks wrote spans at ~1,900/s. A vertical merge sorts the key columns first,
-- then copies the other columns one at a time, which keeps a merge's memory to about one column's
-- blocks (tracked peak ~30 MB on the same load). ClickHouse only chooses it above 131,072 rows and
-- 11 non-key columns by default; our parts are small (a sink inserts up to 1,000 records a batch),
-- so the thresholds go to their minimum. Measured with `make bench`, see docs/performance.md.

ALTER TABLE spans MODIFY SETTING vertical_merge_algorithm_min_rows_to_activate = 1, vertical_merge_algorithm_min_columns_to_activate = 1;

ALTER TABLE triplets MODIFY SETTING vertical_merge_algorithm_min_rows_to_activate = 1, vertical_merge_algorithm_min_columns_to_activate = 1;
