#!/bin/sh
# Create the namespace the workers poll, with its retention, if it is missing, and
# register the search attributes durable-subagents writes; existing ones are kept.
# Temporal's server image creates no namespace (its auto-setup image did).
set -u
ns="${TEMPORAL_NAMESPACE:-default}"
retention="${RETENTION:-7d}"

# The server answers on its port before it serves: wait until it does (2 minutes).
tries=0
until temporal operator cluster health >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge 60 ]; then
        echo "Temporal at ${TEMPORAL_ADDRESS:-?} is not serving after 2 minutes" >&2
        exit 1
    fi
    sleep 2
done

if temporal operator namespace describe --namespace "$ns" >/dev/null 2>&1; then
    echo "namespace $ns exists (its retention is left as it is)"
else
    temporal operator namespace create --namespace "$ns" --retention "$retention" || exit 1
fi

# A new namespace reaches every part of the server within seconds: retry until then.
for spec in SubagentStatus:Keyword SubagentAgent:Keyword SubagentParent:Keyword SubagentTurns:Int; do
    name="${spec%%:*}"
    type="${spec##*:}"
    tries=0
    until temporal operator search-attribute list --namespace "$ns" | grep -q "$name"; do
        tries=$((tries + 1))
        if temporal operator search-attribute create --namespace "$ns" --name "$name" --type "$type"; then
            break
        fi
        if [ "$tries" -ge 15 ]; then
            echo "could not register the search attribute $name in $ns" >&2
            exit 1
        fi
        sleep 2
    done
    echo "$name registered"
done
