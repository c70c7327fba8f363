#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster on 127.0.0.1 for the store tests.
#   scripts/pg-cluster.sh start DIR   # initdb into DIR, start on a free port, print the URL
#   scripts/pg-cluster.sh restart DIR [SECONDS]  # stop it, wait, start it on the same port
#   scripts/pg-cluster.sh stop DIR    # stop it (the caller removes DIR)
# Installs Debian's `postgresql` when the binaries are missing. initdb refuses
# to run as root: as root, the cluster runs as the `postgres` user.
set -euo pipefail
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
cmd=${1:?start|stop}
dir=${2:?DIR}
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case "$cmd" in
  start)
    if [ ! -x "$PGBIN/initdb" ]; then
      apt-get install -y -q postgresql >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; }
    fi
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_pg "$PGBIN/initdb" -D "$dir/data" -A trust -U car --no-sync >/dev/null
    as_pg "$PGBIN/pg_ctl" -D "$dir/data" -o "-k $dir -p $port -h 127.0.0.1" -l "$dir/log" -w start >/dev/null
    echo "$port" > "$dir/port"
    echo "postgres://car@127.0.0.1:$port/postgres"
    ;;
  restart)
    # Down for ${3:-0} seconds, then up again on the same port.
    as_pg "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    sleep "${3:-0}"
    port=$(cat "$dir/port")
    as_pg "$PGBIN/pg_ctl" -D "$dir/data" -o "-k $dir -p $port -h 127.0.0.1" -l "$dir/log" -w start >/dev/null
    ;;
  stop)
    as_pg "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    ;;
  *) echo "usage: $0 start|restart|stop DIR" >&2; exit 2 ;;
esac
