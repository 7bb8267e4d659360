-- The memory series of a remedy's replay (engine::analysis::Series encoding), computed when a
-- post-mortem page first overlays that remedy on its timeline and kept, so the next view draws
-- at once. The key is the remedy spec as the user wrote it (e.g. `amp=bf16+checkpoint`).
CREATE TABLE remedy_series (
    snapshot_id  UUID NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    spec         TEXT NOT NULL CHECK (length(spec) BETWEEN 1 AND 200),
    events       BIGINT NOT NULL,
    data         BYTEA NOT NULL,
    PRIMARY KEY (snapshot_id, spec)
);
