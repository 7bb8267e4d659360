#!/usr/bin/env bash
# Builds the browser half of the web UI into target/site/pkg (oomlens.js, oomlens.wasm,
# oomlens.css), where `oomlens serve` finds it (--site-dir / LEPTOS_SITE_ROOT to move it).
# Installs what it needs first, only when missing (idempotent): the wasm32 target (rustup) and
# wasm-bindgen-cli of the exact version pinned in Cargo.toml (from crates.io, once: 2.5 to 8 min).
# Nothing else is downloaded: no cargo-leptos, no CDN, no fonts. Fast when up to date.
#
#   OOMLENS_UI_PROFILE=dev scripts/build-ui.sh    # unoptimised wasm (bigger), for quick iterations
#   OOMLENS_SITE_DIR=/srv/oomlens/site scripts/build-ui.sh
#   OOMLENS_WASM_OPT=/opt/binaryen/node_modules/.bin/wasm-opt scripts/build-ui.sh
#       # optional: npm's binaryen@132 (2.0 MB → 0.8 MB of wasm, +30 s; measured, hydrates)
#
# The server half needs no step of its own: LEPTOS_OUTPUT_NAME comes from .cargo/config.toml.
# wasm-opt only when OOMLENS_WASM_OPT names one: Debian's binaryen 108 breaks hydration, so one
# found on PATH is not trusted (see README "The web UI").
set -euo pipefail
cd "$(dirname "$0")/.."

WASM_BINDGEN_VERSION=0.2.130
profile="${OOMLENS_UI_PROFILE:-wasm-release}"
site="${OOMLENS_SITE_DIR:-target/site}"
target_dir="${CARGO_TARGET_DIR:-target}"
case "$profile" in
  dev) profile_dir=debug ;;
  release) profile_dir=release ;;
  *) profile_dir="$profile" ;;
esac

if ! grep -q "^version = \"$WASM_BINDGEN_VERSION\"" <(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock); then
  echo "build-ui.sh: Cargo.lock's wasm-bindgen is not $WASM_BINDGEN_VERSION; update WASM_BINDGEN_VERSION here and the pin in Cargo.toml together" >&2
  exit 1
fi
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  echo "==> rustup target add wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi
if [ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $WASM_BINDGEN_VERSION" ]; then
  echo "==> installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (crates.io; once)"
  # Not --locked: its lock names a webpki-roots version the index does not have.
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

echo "==> building the UI's wasm (profile $profile)"
cargo build --locked -p oomlens-frontend --lib --target wasm32-unknown-unknown --profile "$profile"
wasm="$target_dir/wasm32-unknown-unknown/$profile_dir/oomlens_frontend.wasm"

pkg="$site/pkg"
if [ -f "$pkg/oomlens.wasm" ] && [ -f "$pkg/oomlens.js" ] && [ -f "$pkg/oomlens.css" ] \
  && [ "$pkg/oomlens.wasm" -nt "$wasm" ] && [ "$pkg/oomlens.css" -nt style/main.css ]; then
  echo "==> $pkg is up to date"
  exit 0
fi
mkdir -p "$site"
tmp="$(mktemp -d "$site/.pkg.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
wasm-bindgen --target web --no-typescript --out-dir "$tmp" --out-name oomlens "$wasm"
# leptos asks for `oomlens.wasm` when the server was compiled with LEPTOS_OUTPUT_NAME set.
mv "$tmp/oomlens_bg.wasm" "$tmp/oomlens.wasm"
if [ -n "${OOMLENS_WASM_OPT:-}" ]; then
  echo "==> $OOMLENS_WASM_OPT -Oz"
  "$OOMLENS_WASM_OPT" -Oz --enable-bulk-memory --enable-nontrapping-float-to-int \
    "$tmp/oomlens.wasm" -o "$tmp/oomlens.opt.wasm"
  mv "$tmp/oomlens.opt.wasm" "$tmp/oomlens.wasm"
fi
cp style/main.css "$tmp/oomlens.css"
rm -rf "$pkg"
mv "$tmp" "$pkg"
chmod 755 "$pkg"
trap - EXIT
echo "==> $pkg: $(du -b "$pkg/oomlens.wasm" | cut -f1) bytes of wasm ($(gzip -9 -c "$pkg/oomlens.wasm" | wc -c) gzipped)"
