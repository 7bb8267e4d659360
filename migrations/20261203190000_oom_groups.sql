-- Repeated OOMs, grouped by fingerprint (engine::fingerprint: first user frame, phase, request
-- size bucket, allocator settings). `fingerprint` is the key (one line); `parts` the fingerprint's
-- fields as JSON for display. A resolved group that gets a new member opens again, marked as a
-- regression.
CREATE TABLE oom_groups (
    id            UUID PRIMARY KEY,
    team_id       BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    fingerprint   TEXT NOT NULL CHECK (length(fingerprint) BETWEEN 1 AND 2000),
    parts         JSON NOT NULL,
    status        TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'resolved')),
    regression    BOOLEAN NOT NULL DEFAULT false,
    reopened_at   TIMESTAMPTZ,
    resolved_at   TIMESTAMPTZ,
    occurrences   INT NOT NULL DEFAULT 0,
    first_seen    TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen     TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (team_id, fingerprint)
);
CREATE INDEX oom_groups_team_seen ON oom_groups (team_id, last_seen DESC);

-- The uploads in a group: a snapshot or an OOM log belongs to at most one group.
CREATE TABLE oom_group_members (
    group_id    UUID NOT NULL REFERENCES oom_groups(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL CHECK (kind IN ('snapshot', 'oom_log')),
    subject_id  UUID NOT NULL,
    added_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, subject_id)
);
CREATE INDEX oom_group_members_group ON oom_group_members (group_id, added_at);

-- Outgoing webhooks: POSTed on a new group and on a regression, signed with `secret`
-- (HMAC-SHA256 of the body, header X-Oomlens-Signature: sha256=HEX).
CREATE TABLE webhooks (
    id          UUID PRIMARY KEY,
    team_id     BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    url         TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2000),
    secret      TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_team ON webhooks (team_id);

-- Every delivery attempt's outcome, newest last.
CREATE TABLE webhook_deliveries (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    webhook_id   UUID NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    event        TEXT NOT NULL,
    payload      JSON NOT NULL,
    attempts     INT NOT NULL DEFAULT 0,
    status_code  INT,
    error        TEXT,
    delivered_at TIMESTAMPTZ,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_hook ON webhook_deliveries (webhook_id, id DESC);
