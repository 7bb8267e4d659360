#!/usr/bin/env bash
# Builds oomlens (release) and runs `oomlens serve` on its embedded default: a private
# PostgreSQL cluster and blob store in ./oomlens-data, the API on http://127.0.0.1:8080.
# The web UI (scripts/build-ui.sh) is served from target/site. Installs what it needs first
# (idempotent). Extra arguments go to `oomlens serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build-ui.sh
cargo build --release --locked -p oomlens
exec ./target/release/oomlens serve "$@"
