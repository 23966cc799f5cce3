# Sourced by scripts/test-postgres.sh and bench/new_changes.sh (not run): start_postgres
# exports ACTIONGATE_TEST_POSTGRES_URL, a role that may CREATE DATABASE. When it is set
# already it is used as it is; otherwise PostgreSQL is installed from Debian's packages
# when missing, the local cluster started, and the role actiongate (password actiongate)
# created on 127.0.0.1. Expects log() defined.
start_postgres() {
  [ -n "${ACTIONGATE_TEST_POSTGRES_URL:-}" ] && return 0
  if ! command -v pg_lsclusters >/dev/null 2>&1; then
    log "installing PostgreSQL"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  local cluster version port
  cluster=$(pg_lsclusters --no-header | awk 'NR==1 {print $1" "$2}')
  if [ -z "$cluster" ]; then
    version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
    log "creating cluster $version main"
    pg_createcluster "$version" main >/dev/null
    cluster="$version main"
  fi
  # shellcheck disable=SC2086
  set -- $cluster
  if ! pg_lsclusters --no-header | awk -v v="$1" -v n="$2" '$1==v && $2==n {print $4}' | grep -q online; then
    log "starting cluster $1 $2"
    pg_ctlcluster "$1" "$2" start
  fi
  port=$(pg_lsclusters --no-header | awk -v v="$1" -v n="$2" '$1==v && $2==n {print $3}')
  for _ in $(seq 1 50); do
    su postgres -c "psql -p $port -tAc 'SELECT 1'" >/dev/null 2>&1 && break
    sleep 0.2
  done
  su postgres -c "psql -p $port -v ON_ERROR_STOP=1 -qc \"DO \\\$\\\$ BEGIN
      IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'actiongate') THEN
        CREATE ROLE actiongate LOGIN CREATEDB PASSWORD 'actiongate';
      END IF; END \\\$\\\$;\""
  export ACTIONGATE_TEST_POSTGRES_URL="postgres://actiongate:actiongate@127.0.0.1:$port/postgres"
}
