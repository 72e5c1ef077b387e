"""Permission rules, and the bash reader they judge commands with.

Pure functions, safe to call from workflow code.
"""

from durable_subagents.policy._rules import (
    READ_ONLY_TOOLS,
    SEARCH_TOOLS,
    PathRules,
    arguments_hash,
    arguments_preview,
    call_hash,
    decide,
    has_rules_for,
    main_argument,
    mode_default,
    protected_write,
    result_record_name,
    rule_target_key,
    rules_for,
)
from durable_subagents.policy._verdicts import Verdict, verdict

__all__ = [
    "READ_ONLY_TOOLS",
    "SEARCH_TOOLS",
    "PathRules",
    "Verdict",
    "arguments_hash",
    "arguments_preview",
    "call_hash",
    "decide",
    "has_rules_for",
    "main_argument",
    "mode_default",
    "protected_write",
    "result_record_name",
    "rule_target_key",
    "rules_for",
    "verdict",
]
