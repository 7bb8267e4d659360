-- Accounts for the web UI: users (one team each, a role), their sign-in sessions, and invitation
-- links. The REST API keeps its team tokens (api_tokens); the web pages sign in with these.
--
-- Emails are stored lower-cased (the unique index is on lower(email), so a row written some other
-- way cannot sneak a case variant in); passwords only as argon2id PHC strings. Sessions and
-- invitations are stored as the SHA-256 of their secret, like API tokens: the secrets are 256
-- random bits, so a slow hash adds nothing.

CREATE TABLE users (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team_id        BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    email          TEXT NOT NULL CHECK (email = lower(email) AND length(email) BETWEEN 3 AND 254),
    password_hash  TEXT NOT NULL CHECK (password_hash LIKE '$argon2id$%'),
    role           TEXT NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    disabled       BOOLEAN NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX users_email ON users (lower(email));
CREATE INDEX users_team ON users (team_id);

-- A signed-in browser. `id` is the SHA-256 of the cookie's value; `csrf_secret` is the token its
-- forms carry (field `csrf`, or header `x-csrf-token`).
CREATE TABLE sessions (
    id            BYTEA PRIMARY KEY CHECK (length(id) = 32),
    user_id       BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    csrf_secret   TEXT NOT NULL CHECK (length(csrf_secret) >= 32),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at    TIMESTAMPTZ NOT NULL,
    last_seen_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX sessions_user ON sessions (user_id);
CREATE INDEX sessions_expires ON sessions (expires_at);

-- An invitation link `/invite/<token>`: single use, until it expires.
CREATE TABLE invitations (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token_sha256  BYTEA NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    team_id       BIGINT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    role          TEXT NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
    created_by    BIGINT REFERENCES users(id) ON DELETE SET NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at    TIMESTAMPTZ NOT NULL,
    used_at       TIMESTAMPTZ,
    used_by       BIGINT REFERENCES users(id) ON DELETE SET NULL
);
CREATE INDEX invitations_team ON invitations (team_id, created_at DESC);
