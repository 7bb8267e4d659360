#!/usr/bin/env bash
# Installs the system packages oomlens needs, only when they are missing (idempotent):
# PostgreSQL's server binaries (the embedded database of `oomlens serve` and of the tests) and
# its psql client. Sourced by serve.sh and test.sh.
set -euo pipefail

have_postgres() {
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && command -v psql >/dev/null
}

if ! have_postgres; then
  echo "==> installing PostgreSQL (Debian package postgresql)"
  if [ "$(id -u)" -eq 0 ]; then
    apt_get=(apt-get)
  elif command -v sudo >/dev/null; then
    apt_get=(sudo apt-get)
  else
    echo "PostgreSQL is missing and this user cannot install it: run 'apt-get install postgresql' as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${apt_get[@]}" update -qq
  "${apt_get[@]}" install -y -qq --no-install-recommends postgresql >/dev/null
fi
