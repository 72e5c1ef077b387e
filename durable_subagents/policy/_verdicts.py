"""A call's verdict: whether it runs, waits for a decision, or goes back as an error.

One definition for the workflow, which decides every call, and for the model turn,
which runs the reads the workflow would allow (``ModelTurnInput.reads``) before it
answers. Pure: safe to call from workflow code.
"""

from __future__ import annotations

from durable_subagents.agents import READ_ONLY_TOOLS, AgentSpec
from durable_subagents.agents._spec import SPAWN_TOOLS
from durable_subagents.policy._rules import decide, has_rules_for, protected_write, rule_target_key
from durable_subagents.types import ToolCall

Verdict = tuple[str, str | None]
"""A call's verdict, ``(action, error)``: ``allow``, ``ask``, or ``deny`` with the error
the model sees."""


def verdict(
    call: ToolCall,
    spec: AgentSpec,
    offered: list[str],
    *,
    read_only: set[str],
    protected: list[str] | None,
) -> Verdict:
    """Whether a call runs, waits for a decision, or goes back as an error.

    Args:
        call: The model's call.
        spec: The task's agent.
        offered: The tools the worker offered the model.
        read_only: The offered tools the worker reported as read-only.
        protected: Every protected path the run's workers reported (None: no turn has
            reported any yet, so ``PROTECTED_PATHS``).
    """
    if call.name not in offered and call.name in SPAWN_TOOLS and spec.may_spawn:
        return "deny", (
            f"{call.name} is not offered: this task's tree is as deep as its spawn allows "
            "(max_depth); do the work yourself"
        )
    if call.name not in offered:
        names = ", ".join(offered) or "none"
        return "deny", f"unknown tool {call.name!r}; available tools: {names}"
    if "_raw" in call.arguments:
        return "deny", "the arguments were not valid JSON; send a JSON object"
    if call.name in SPAWN_TOOLS:
        return "allow", None  # may_spawn is the permission; the children are narrowed
    if call.rule_target_truncated and has_rules_for(spec, call.name):
        return "deny", (
            f"{call.name}: the {rule_target_key(call.arguments)} is too long to "
            "check against this agent's permission rules; make it shorter"
        )
    reads = call.name in read_only or call.name in READ_ONLY_TOOLS
    action = decide(
        spec,
        call.name,
        call.arguments,
        read_only=reads,
        path=call.path,  # set by workers that resolve paths for the rules
        # and, where a symlink makes it differ, the path as written (set by
        # workers that bind decisions)
        written=call.written_path,
    )
    if (
        action == "allow"
        and not spec.write_protected_paths
        and protected_write(
            call.name,
            call.arguments,
            read_only=reads,
            path=call.path,
            protected=protected,
        )
    ):
        action = "ask"  # agent definitions and hooks: a person decides
    if action == "deny":
        return (
            "deny",
            f"{call.name} was denied by this agent's permission rules; do not retry it",
        )
    return action, None
