-- Read-only share links to one post-mortem (viewable without signing in, revocable), and what the
-- post-mortem page draws beyond the analysis JSON: the full-resolution memory series (for zooming
-- the timeline) and the allocator's state at the OOM.

-- Only the SHA-256 of a link's secret is stored: the URL is shown once, when it is made.
CREATE TABLE share_links (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team_id       BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    snapshot_id   UUID NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    secret_sha256 BYTEA NOT NULL UNIQUE CHECK (length(secret_sha256) = 32),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at    TIMESTAMPTZ
);
CREATE INDEX share_links_snapshot ON share_links (snapshot_id);

-- Per-event allocated/reserved bytes of the main device (engine::analysis::Series, its own
-- compact versioned encoding), written by the analysis worker with the analysis.
CREATE TABLE snapshot_series (
    snapshot_id  UUID PRIMARY KEY REFERENCES snapshots(id) ON DELETE CASCADE,
    events       BIGINT NOT NULL,
    data         BYTEA NOT NULL
);

-- The allocator's segments and blocks at the OOM (engine::analysis OomState as JSON).
ALTER TABLE snapshots ADD COLUMN oom_state JSON;
