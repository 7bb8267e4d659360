-- A GPU replay's trace, uploaded by the runner before its result: the replay as `_dump_snapshot`
-- would write it (gzip pickle, blocks at the GPU's addresses), kept in the blob store under its
-- content key, for memory_viz.
ALTER TABLE replays ADD COLUMN trace_blob_key TEXT;
ALTER TABLE replays ADD COLUMN trace_size_bytes BIGINT CHECK (trace_size_bytes > 0);
