-- Review of a post-mortem (issue 8): a review status and an assignee on each snapshot, comments
-- (markdown as written, and its HTML rendered once and sanitised), and an activity log.
--
-- A comment keeps its author's name (the user's email, or the API token's name) beside the
-- user's id, so that it still says who wrote it when the account is gone. `anchor` is
-- `{"kind": "timeline", "event": N}` or `{"kind": "remedy", "spec": "..."}`, or NULL.

ALTER TABLE snapshots
    ADD COLUMN review_status TEXT NOT NULL DEFAULT 'open'
        CHECK (review_status IN ('open', 'investigating', 'resolved', 'wontfix')),
    ADD COLUMN assignee_id BIGINT REFERENCES users(id) ON DELETE SET NULL;

CREATE TABLE comments (
    id              UUID PRIMARY KEY,
    team_id         BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    snapshot_id     UUID NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    author_user_id  BIGINT REFERENCES users(id) ON DELETE SET NULL,
    author_name     TEXT NOT NULL,
    body_markdown   TEXT NOT NULL CHECK (length(body_markdown) BETWEEN 1 AND 20000),
    body_html       TEXT NOT NULL,
    anchor          JSONB,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    edited_at       TIMESTAMPTZ
);
CREATE INDEX comments_snapshot ON comments (snapshot_id, created_at, id);

-- What happened to a post-mortem, and who did it: `kind` is status_changed, assigned,
-- labels_changed, commented (and later uploaded, analysed, replay_queued, replay_done, ...);
-- `detail` holds the kind's values (`{"from": "open", "to": "resolved"}`).
CREATE TABLE activity (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team_id      BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    snapshot_id  UUID NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    actor        TEXT NOT NULL,
    kind         TEXT NOT NULL,
    detail       JSONB NOT NULL DEFAULT '{}'::jsonb,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX activity_snapshot ON activity (snapshot_id, id DESC);
