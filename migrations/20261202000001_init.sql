-- oomlens schema, first version: teams and their API tokens, uploads (snapshots and OOM logs) with
-- their analyses, stored what-if answers, GPU replay requests, and the job queue that the
-- in-process workers (analysis) and the GPU runners (replays) lease from.
--
-- Every object a client can name belongs to exactly one team; every query the API runs is scoped
-- by team_id. Snapshot bytes are not stored here: `blob_key` names them in the blob store.

CREATE TABLE teams (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 200),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Tokens are stored only as their SHA-256 (they are 256-bit random, so a slow hash adds nothing);
-- `prefix` is the first characters of the token, shown by `admin list-tokens` to tell them apart.
CREATE TABLE api_tokens (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team_id       BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    name          TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    token_sha256  BYTEA NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    prefix        TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_used_at  TIMESTAMPTZ,
    revoked_at    TIMESTAMPTZ
);
CREATE INDEX api_tokens_team ON api_tokens (team_id);

CREATE TABLE snapshots (
    id              UUID PRIMARY KEY,
    team_id         BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    labels          TEXT[] NOT NULL DEFAULT '{}',
    -- Run metadata given at upload: commit, job_url, gpu_name (all optional).
    run_commit      TEXT,
    run_job_url     TEXT,
    run_gpu_name    TEXT,
    sha256          BYTEA NOT NULL CHECK (length(sha256) = 32),
    size_bytes      BIGINT NOT NULL CHECK (size_bytes >= 0),
    blob_key        TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'ready', 'failed')),
    error           TEXT,
    -- The analysis, exactly the JSON `oomlens analyze --json` prints (type json keeps the text).
    analysis        JSON,
    -- Summary columns for lists and filters, copied from the analysis when it is stored.
    peak_allocated_bytes BIGINT,
    peak_reserved_bytes  BIGINT,
    oom             BOOLEAN,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    analysed_at     TIMESTAMPTZ,
    UNIQUE (team_id, sha256)
);
CREATE INDEX snapshots_team_created ON snapshots (team_id, created_at DESC, id DESC);
CREATE INDEX snapshots_team_name ON snapshots (team_id, name, created_at DESC);

-- A what-if question and its answer, stored so that the same question returns the same answer.
-- `question` is the canonical form: capacity and the remedy list as given.
CREATE TABLE whatifs (
    id           UUID PRIMARY KEY,
    team_id      BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    snapshot_id  UUID NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    question     TEXT NOT NULL,
    result       JSON NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (snapshot_id, question)
);

CREATE TABLE oom_logs (
    id           UUID PRIMARY KEY,
    team_id      BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    sha256       BYTEA NOT NULL CHECK (length(sha256) = 32),
    size_bytes   BIGINT NOT NULL,
    body         TEXT NOT NULL,
    analysis     JSON NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (team_id, sha256)
);
CREATE INDEX oom_logs_team_created ON oom_logs (team_id, created_at DESC, id DESC);

-- A GPU replay asked for: what to replay and, once a runner answered, its result.
CREATE TABLE replays (
    id                   UUID PRIMARY KEY,
    team_id              BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    snapshot_id          UUID NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    capacity_bytes       BIGINT NOT NULL CHECK (capacity_bytes > 0),
    device_memory_bytes  BIGINT CHECK (device_memory_bytes > 0),
    alloc_conf           TEXT,
    remedies             TEXT[] NOT NULL DEFAULT '{}',
    status               TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'done', 'failed')),
    result               JSON,
    error                TEXT,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at          TIMESTAMPTZ
);
CREATE INDEX replays_team_created ON replays (team_id, created_at DESC);

-- The job queue. A job is leased with FOR UPDATE SKIP LOCKED; a lease that is not renewed
-- (heartbeat) expires and the job is leased again. `kind` says who takes it: the server's
-- workers take 'analyze', GPU runners take 'gpu_replay' (over HTTP, with the same lease rules).
-- `subject_id` is the snapshot (analyze) or the replay (gpu_replay).
CREATE TABLE jobs (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind              TEXT NOT NULL CHECK (kind IN ('analyze', 'gpu_replay')),
    team_id           BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    subject_id        UUID NOT NULL,
    state             TEXT NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'done', 'failed')),
    attempts          INT NOT NULL DEFAULT 0,
    max_attempts      INT NOT NULL DEFAULT 5 CHECK (max_attempts > 0),
    run_after         TIMESTAMPTZ NOT NULL DEFAULT now(),
    leased_by         TEXT,
    lease_expires_at  TIMESTAMPTZ,
    last_error        TEXT,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at       TIMESTAMPTZ,
    CHECK ((state = 'running') = (leased_by IS NOT NULL AND lease_expires_at IS NOT NULL))
);
-- The jobs a worker may lease: queued ones whose time has come and running ones whose lease ran out.
CREATE INDEX jobs_leasable ON jobs (kind, run_after, id) WHERE state IN ('queued', 'running');
CREATE INDEX jobs_subject ON jobs (subject_id);

-- Wakes idle workers at once; they also poll, so a lost notification only delays a job.
CREATE FUNCTION jobs_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('oomlens_jobs', NEW.kind);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER jobs_notify AFTER INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION jobs_notify();
