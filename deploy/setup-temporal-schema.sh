#!/bin/sh
# Create Temporal's two databases on PostgreSQL and bring their schemas up to this
# admin-tools version: the one-shot schema job Temporal recommends for its server image,
# in place of the auto-setup image (for development only), which did this at every
# start. Safe to run again: an upgrade runs it with the new version's admin-tools before
# the new server starts. temporal-sql-tool reads the password from SQL_PASSWORD.
set -eu
host="${SQL_HOST:?SQL_HOST is not set}"
port="${SQL_PORT:-5432}"
user="${SQL_USER:?SQL_USER is not set}"
: "${SQL_PASSWORD:?SQL_PASSWORD is not set}"
schema="${SCHEMA_DIR:-/etc/temporal/schema/postgresql/v12}"

for pair in "${DBNAME:-temporal}:temporal" "${VISIBILITY_DBNAME:-temporal_visibility}:visibility"; do
    db="${pair%%:*}"
    kind="${pair##*:}"
    # An existing database is kept; any other failure fails the next step, loudly.
    temporal-sql-tool --plugin postgres12 --ep "$host" -p "$port" -u "$user" --db "$db" create ||
        echo "database $db exists"
    temporal-sql-tool --plugin postgres12 --ep "$host" -p "$port" -u "$user" --db "$db" \
        setup-schema -v 0.0
    temporal-sql-tool --plugin postgres12 --ep "$host" -p "$port" -u "$user" --db "$db" \
        update-schema -d "$schema/$kind/versioned"
done
echo "Temporal's schema is up to date"
