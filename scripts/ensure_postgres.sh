#!/usr/bin/env bash
# Make sure PostgreSQL answers on $PGHOST:$PGPORT: start the local cluster if it is
# installed but stopped; say what to install if it is missing.
set -euo pipefail
host=${PGHOST:-127.0.0.1}
port=${PGPORT:-5432}
if pg_isready -q -h "$host" -p "$port" 2>/dev/null; then
  exit 0
fi
if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
  for version in $(ls /etc/postgresql); do
    echo "PostgreSQL $version is installed but not running: starting it" >&2
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  done
  for _ in $(seq 1 30); do
    pg_isready -q -h "$host" -p "$port" && exit 0
    sleep 1
  done
  echo "PostgreSQL did not come up on $host:$port" >&2
  exit 1
fi
cat >&2 <<MSG
PostgreSQL is not reachable on $host:$port and is not installed here.
Install it (Debian/Ubuntu: apt-get install postgresql) and allow trust or password
auth for user postgres on 127.0.0.1, or point DATABASE_URL at a server you have:
  DATABASE_URL=postgres://USER:PASSWORD@HOST:5432/tiffin make test
MSG
exit 1
