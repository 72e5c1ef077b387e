#!/bin/sh
# Register the search attributes durable-subagents writes; existing ones are kept.
set -u
ns="${TEMPORAL_NAMESPACE:-default}"
for spec in SubagentStatus:Keyword SubagentAgent:Keyword SubagentParent:Keyword SubagentTurns:Int; do
    name="${spec%%:*}"
    type="${spec##*:}"
    if temporal operator search-attribute list --namespace "$ns" | grep -q "$name"; then
        echo "$name already registered"
    else
        temporal operator search-attribute create --namespace "$ns" --name "$name" --type "$type"
    fi
done
