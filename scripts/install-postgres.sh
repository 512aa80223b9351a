#!/usr/bin/env bash
# Install (if missing) Debian's PostgreSQL server programs for the tests, which make a
# throw-away cluster of their own (`initdb` in a temp dir, a loopback port) and remove it.
#
# Idempotent; safe to run again. Debian's default cluster service is NOT started: the
# tests need none, and it would hold port 5432 for nothing.
# Last line of stdout: the directory holding initdb, postgres and pg_ctl
# (e.g. /usr/lib/postgresql/15/bin).
set -euo pipefail

say() { echo "install-postgres: $*" >&2; }

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# The newest installed server's bin directory; empty when there is none.
bin_dir() {
    local dir
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ] && [ -x "$dir/pg_ctl" ]; then
        echo "$dir"
    fi
}

if [ -z "$(bin_dir)" ]; then
    say "installing postgresql"
    export DEBIAN_FRONTEND=noninteractive
    # The package's postinst starts the default cluster through invoke-rc.d unless a
    # policy-rc.d forbids it (exit 101); add one for the install when the host has none.
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# install-postgres.sh: no service starts during its install\nexit 101\n' |
            $sudo tee "$policy" >/dev/null
        $sudo chmod 755 "$policy"
        trap '$sudo rm -f "$policy"' EXIT
    fi
    # Package lists may be absent on a fresh image; refresh once if install fails.
    if ! $sudo apt-get install -y -qq --no-install-recommends postgresql >&2; then
        $sudo apt-get update -qq >&2
        $sudo apt-get install -y -qq --no-install-recommends postgresql >&2
    fi
fi

dir="$(bin_dir)"
if [ -z "$dir" ]; then
    say "postgresql is installed but no /usr/lib/postgresql/*/bin has initdb, postgres and pg_ctl"
    exit 1
fi
# initdb refuses to run as root: the tests run it as this user when they are root.
if [ "$(id -u)" -eq 0 ] && ! id -u postgres >/dev/null 2>&1; then
    say "the postgres user is missing (Debian's postgresql-common creates it); reinstall postgresql-common"
    exit 1
fi
say "$("$dir/postgres" --version)"
echo "$dir"
