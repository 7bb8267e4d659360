#!/usr/bin/env bash
# Installs the system packages oomlens needs, only when they are missing (idempotent):
# PostgreSQL's server binaries (the embedded database of `oomlens serve` and of the tests) and
# its psql client. With the argument `browser` (test.sh passes it), also Debian's Chromium and a
# font for its screenshots, which the browser tests (tests/e2e/browser.rs) drive headless; a user
# who cannot install them gets a warning, and those tests print SKIPPED. Sourced by serve.sh
# and test.sh.
set -euo pipefail

have_postgres() {
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && command -v psql >/dev/null
}

apt_get=()
if [ "$(id -u)" -eq 0 ]; then
  apt_get=(apt-get)
elif command -v sudo >/dev/null; then
  apt_get=(sudo apt-get)
fi
updated=""
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$updated" ]; then
    "${apt_get[@]}" update -qq
    updated=1
  fi
  "${apt_get[@]}" install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! have_postgres; then
  echo "==> installing PostgreSQL (Debian package postgresql)"
  if [ "${#apt_get[@]}" -eq 0 ]; then
    echo "PostgreSQL is missing and this user cannot install it: run 'apt-get install postgresql' as root" >&2
    exit 1
  fi
  apt_install postgresql
fi

if [ "${1:-}" = browser ]; then
  browser=()
  [ -x /usr/bin/chromium ] || browser+=(chromium)
  # Without a font Chromium's screenshots show boxes instead of text.
  [ -d /usr/share/fonts/truetype/dejavu ] || browser+=(fonts-dejavu-core)
  if [ "${#browser[@]}" -gt 0 ]; then
    echo "==> installing ${browser[*]} (Debian packages; for the browser tests)"
    if [ "${#apt_get[@]}" -eq 0 ]; then
      echo "warning: ${browser[*]} missing and this user cannot install them ('apt-get install ${browser[*]}' as root): the browser tests will be SKIPPED" >&2
    else
      apt_install "${browser[@]}"
    fi
  fi
fi
