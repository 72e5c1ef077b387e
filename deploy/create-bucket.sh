#!/bin/sh
# Create the blob store's bucket (an existing one is kept) from the settings the workers
# read: SUBAGENTS_BLOB_URL=s3://BUCKET/PREFIX, AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY. The library never creates buckets.
#
# BLOB_EXPIRE_DAYS=N (N > 0) replaces the bucket's lifecycle rules with one that expires
# objects under PREFIX/ N days after each was written: a backstop for blobs the workers'
# sweep never reached. 0 (the default) leaves the bucket's lifecycle rules as they are.
set -eu

url="${SUBAGENTS_BLOB_URL:?SUBAGENTS_BLOB_URL is not set}"
case "$url" in
    s3://?*) ;;
    *)
        echo "SUBAGENTS_BLOB_URL must be s3://BUCKET/PREFIX, not '$url'" >&2
        exit 2
        ;;
esac
rest="${url#s3://}"
bucket="${rest%%/*}"
prefix=""
if [ "$rest" != "$bucket" ]; then
    prefix="${rest#*/}"
    prefix="${prefix%/}"
fi
days="${BLOB_EXPIRE_DAYS:-0}"
case "$days" in
    '' | *[!0-9]*)
        echo "BLOB_EXPIRE_DAYS must be a whole number of days, not '$days'" >&2
        exit 2
        ;;
esac

mc alias set store "${AWS_ENDPOINT_URL:?AWS_ENDPOINT_URL is not set}" \
    "${AWS_ACCESS_KEY_ID:?}" "${AWS_SECRET_ACCESS_KEY:?}"
mc mb --ignore-existing "store/$bucket"

if [ "$days" -gt 0 ]; then
    # Replace rather than add, so that every start leaves exactly one rule.
    mc ilm rule rm --all --force "store/$bucket" >/dev/null 2>&1 || true
    if [ -n "$prefix" ]; then
        mc ilm rule add --prefix "$prefix/" --expire-days "$days" "store/$bucket"
    else
        mc ilm rule add --expire-days "$days" "store/$bucket"
    fi
    echo "objects under s3://$bucket/${prefix:+$prefix/} expire $days days after they are written"
fi
echo "bucket $bucket ready"
