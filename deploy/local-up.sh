#!/usr/bin/env bash
# `make up`: the web server (gunicorn, static files by whitenoise) and one worker (the
# django-q2 cluster plus the scheduler loop) on the local database, as production runs
# them. Run `make demo` first for data to look at. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
# The virtualenv's programs (VENV_BIN: another virtualenv's, as the tests pass theirs).
VENV_BIN=${VENV_BIN:-.venv/bin}
PY=$VENV_BIN/python
export PORT=${PORT:-8000} HOST=${HOST:-127.0.0.1}
# DEBUG=1 by default: the development key the demo's queued tasks were signed with is
# accepted only with DEBUG on. Give a SECRET_KEY (and DEBUG=0) to run as production does.
export DEBUG=${DEBUG:-1}
# A laptop serves plain HTTP on localhost: no HTTPS redirect, no secure-only cookies.
export SECURE_SSL_REDIRECT=0 SESSION_COOKIE_SECURE=0 CSRF_COOKIE_SECURE=0 SECURE_HSTS_SECONDS=0
DATABASE_URL=${DATABASE_URL:-sqlite:///db/tiffin.sqlite3}
export DATABASE_URL

$PY manage.py migrate --noinput --verbosity 0
$PY manage.py collectstatic --noinput --verbosity 0

if [[ $DATABASE_URL == sqlite:* ]]; then
  # The local SQLite demo only: a superuser 'admin' with a fresh random password, printed
  # here. Never on PostgreSQL, where `manage.py createsuperuser` is the way.
  password=$($PY -c 'import secrets; print(secrets.token_urlsafe(12))')
  DEMO_ADMIN_PASSWORD=$password $PY manage.py shell --verbosity 0 -c '
import os
from django.contrib.auth.models import User
user = User.objects.filter(username="admin").first() or User(username="admin", email="admin@localhost")
user.is_staff = user.is_superuser = True
user.set_password(os.environ["DEMO_ADMIN_PASSWORD"])
user.save()
'
  login="user 'admin', password '$password' (local demo only; reset on every make up)"
else
  login="create a user with: DATABASE_URL=... $PY manage.py createsuperuser"
fi

# After `make demo`: the simulated servers are gone and the demo's history ends in the
# simulated past; start the schedules afresh from now (one line says so) instead of
# taking the days between for an outage. Does nothing on a database no simulation ran on.
# The command is the simulation app's, installed with the development tools only (DEBUG=1
# or TIFFIN_DEVELOPMENT=1); run as production does, there is nothing to hand over.
handover=""
if $PY manage.py help end_simulation >/dev/null 2>&1; then
  handover=$($PY manage.py end_simulation)
fi

# The processes log to files, so the terminal keeps the login and the addresses.
LOG_DIR=${LOG_DIR:-db}
mkdir -p "$LOG_DIR"
worker_log=$LOG_DIR/worker.log web_log=$LOG_DIR/web.log
: >"$worker_log"
: >"$web_log"

# Each server gets its own process group (job control on), so Ctrl-C reaches only this
# script, whose trap stops each once, the way a process manager does: SIGTERM to the main
# process alone. (Ctrl-C also reaching gunicorn's master and workers, followed by the
# trap's SIGTERM, made two overlapping shutdowns; a signal to every process of the
# django-q2 cluster at once can leave the cluster's stop waiting forever on a lock a
# killed child held.) On a laptop a request in flight gets WEB_GRACEFUL_TIMEOUT_SECONDS
# (default 5) to finish, not the deployment's 20.
export WEB_GRACEFUL_TIMEOUT_SECONDS=${WEB_GRACEFUL_TIMEOUT_SECONDS:-5}
set -m
$PY manage.py worker >>"$worker_log" 2>&1 &
worker=$!
# gunicorn's own log, its access log and what Django writes (stderr) all go to the web log.
"$VENV_BIN/gunicorn" tiffin.wsgi --config deploy/gunicorn.conf.py --access-logfile "$web_log" --error-logfile "$web_log" \
  >>"$web_log" 2>&1 &
web=$!
set +m
stop() {
  [[ -z ${stopped:-} ]] || return 0
  stopped=1
  # A second signal must not cut the wait short: `make up` stopped by SIGTERM (a process
  # manager, `kill` of its group) sends its own SIGTERM on to this script, and the INT/TERM
  # trap's `exit` would end the script before the servers have, without "Stopped.".
  trap '' INT TERM
  echo "  Stopping the web server and the worker..."
  kill -TERM $web $worker 2>/dev/null || true
  wait $web $worker 2>/dev/null || true
  echo "  Stopped."
}
# However this script ends (Ctrl-C, SIGTERM, or gunicorn failing), both stop.
trap stop EXIT
# The handler itself ignores further signals first: a second one (make passes its own
# SIGTERM on) arriving while the first is handled would otherwise run `exit` again from
# inside stop's wait.
trap 'trap "" INT TERM; echo; exit 130' INT TERM

# Wait until gunicorn listens (or has died, whose log then says why).
for _ in $(seq 100); do
  grep -q "Listening at" "$web_log" && break
  kill -0 $web 2>/dev/null || { tail -5 "$web_log"; exit 1; }
  sleep 0.1
done

cat <<MSG
${handover:+
  $handover
}
  Logs:       $worker_log (the worker and its scheduler), $web_log (the web server)
  Tiffin is up on $DATABASE_URL
  Admin:      http://$HOST:$PORT/admin/   ($login)
  Dashboard:  http://$HOST:$PORT/admin/scheduling/schedule/dashboard/
  Explainer:  http://$HOST:$PORT/cron/   (no login needed)
  Health:     http://$HOST:$PORT/healthz
  Ctrl-C stops the web server and the worker.

MSG
wait $web
