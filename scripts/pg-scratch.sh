#!/usr/bin/env bash
# A scratch PostgreSQL cluster for tests: `start DIR` makes one in DIR (initdb, trust
# authentication, loopback and a unix socket in DIR only, no fsync) and prints the URL of
# its database `yy`; `stop DIR` stops it and removes DIR. As root, PostgreSQL's programs
# run as the `postgres` user (initdb refuses root). YY_TEST_POSTGRES_BIN names them.
set -euo pipefail
action=${1:?usage: scripts/pg-scratch.sh start|stop DIR}
dir=${2:?usage: scripts/pg-scratch.sh start|stop DIR}
bin=${YY_TEST_POSTGRES_BIN:?set YY_TEST_POSTGRES_BIN to the directory of the PostgreSQL programs, as scripts/install-postgres.sh prints it}
as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
# A free port on loopback, as the kernel picks one.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
case $action in
start)
    mkdir -p "$dir"
    [ "$(id -u)" -ne 0 ] || chown postgres: "$dir"
    as_postgres "$bin/initdb" -D "$dir/data" -A trust -U yy -E UTF8 --locale=C --no-sync >"$dir/initdb.log"
    port=$(free_port)
    as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
        -o "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c full_page_writes=off" \
        start >/dev/null
    "$bin/createdb" -h 127.0.0.1 -p "$port" -U yy yy
    echo "postgres://yy@127.0.0.1:$port/yy"
    ;;
stop)
    [ -d "$dir/data" ] && as_postgres "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
    rm -rf "$dir"
    ;;
*)
    echo "usage: scripts/pg-scratch.sh start|stop DIR" >&2
    exit 2
    ;;
esac
