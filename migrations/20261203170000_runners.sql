-- GPU runners (`oomlens-runner work`): each start of a runner registers a row with the device it
-- replays on; `last_seen_at` is renewed whenever it leases, heartbeats or posts a result. A runner
-- belongs to the team whose token registered it and only ever leases that team's replays.
CREATE TABLE runners (
    id             UUID PRIMARY KEY,
    team_id        BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    name           TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    -- What the runner reported: GPU name, memory, driver … (free-form JSON object).
    device         JSON NOT NULL,
    registered_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX runners_team_seen ON runners (team_id, last_seen_at DESC);

-- The runner that last leased a replay (kept when the runner row goes).
ALTER TABLE replays ADD COLUMN runner_id UUID REFERENCES runners(id) ON DELETE SET NULL;

-- Runners lease their own team's jobs only.
CREATE INDEX jobs_team_leasable ON jobs (team_id, kind, run_after, id) WHERE state IN ('queued', 'running');
