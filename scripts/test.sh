#!/usr/bin/env bash
# Runs every check and test of oomlens: formatting, clippy (-D warnings), the engine's purity rule,
# and all tests of the workspace. Installs what it needs first (idempotent). Used by the README and
# by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "system packages (PostgreSQL for the server tests, Chromium for the browser tests)"
./scripts/deps.sh browser

step "toolchain components"
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi

step "web UI: the browser half (scripts/build-ui.sh; fast when up to date)"
./scripts/build-ui.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
# The browser half builds only for wasm32 (on the host the frontend crate is empty).
cargo clippy --locked -p oomlens-frontend -p oomlens-app --target wasm32-unknown-unknown -- -D warnings

step "engine purity: no async, database, web or filesystem-path crates in engine's dependency tree"
if cargo tree -p oomlens-engine -e normal --prefix none --format '{p}' --locked \
  | grep -E '^(tokio|sqlx|axum|hyper|reqwest|async-std|futures) ' ; then
  echo "engine must stay pure (see DESIGN.md)"; exit 1
fi

step "cargo test"
cargo test --workspace --locked

echo
echo "all checks passed"
