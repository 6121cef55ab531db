#!/usr/bin/env bash
# Make sure a local PostgreSQL answers with the test role and database the factory's tests use.
# On a Debian host where we are root: install Debian's postgresql and start its cluster when needed;
# anywhere else, say what to do and fail. Prints the URL to use (DFLASH_TEST_PG_URL).
set -euo pipefail

url=postgresql://dflash:dflash@127.0.0.1:5432/dflash_test

if [[ $(id -u) -ne 0 || ! -f /etc/debian_version ]]; then
  if command -v pg_isready >/dev/null 2>&1 && pg_isready -q -h 127.0.0.1; then
    echo "postgres: a server answers; set DFLASH_TEST_PG_URL to a role that may create databases" >&2
    exit 0
  fi
  echo "postgres: none answers on 127.0.0.1:5432 and this is not a Debian host where we are root." >&2
  echo "Start PostgreSQL and set DFLASH_TEST_PG_URL (e.g. $url) for the database tests." >&2
  exit 1
fi

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends postgresql >/dev/null
fi

pg_ver=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
pg_ctlcluster "$pg_ver" main status >/dev/null 2>&1 || pg_ctlcluster "$pg_ver" main start
for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 && break; sleep 1; done
su postgres -c "psql -q -v ON_ERROR_STOP=1" <<'SQL'
SELECT 'CREATE ROLE dflash LOGIN CREATEDB PASSWORD ''dflash'''
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'dflash')\gexec
SELECT 'CREATE DATABASE dflash_test OWNER dflash'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'dflash_test')\gexec
SQL
echo "postgres: ready at $url"
