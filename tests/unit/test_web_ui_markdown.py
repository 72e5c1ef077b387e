"""What the Web UI renders shows untrusted text literally, and nothing else of it.

The summary, details and current details are Markdown. Hostile prompts, descriptions
and tool arguments are rendered by two renderers: markdown-it (CommonMark, in
process) and the dev server's own Web UI (its ``/render`` page, which the UI frames
show). The text they show must be the text given, and everything outside the code
spans must be ours, whatever the arguments hold: no forged line, link or image.
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from durable_subagents import AgentSpec
from durable_subagents.client._events import _tool_of, _turn_of, _turn_summary
from durable_subagents.policy import arguments_preview
from durable_subagents.spawn import static_details, static_summary
from durable_subagents.types import TaskStatus
from durable_subagents.wire._payloads import TaskInput
from durable_subagents.wire._search_attributes import tasks_query, web_ui_tasks_url
from durable_subagents.wording._markdown import code_span, escape, one_line
from durable_subagents.workflows._current_details import current_details

from ..helpers.markdown import commonmark, hostile_text, shown, task_view

# ------------------------------------------------------------------ in process (CommonMark)


@given(hostile_text)
@example("check __init__ in *.py")
@settings(max_examples=400)
def test_escaped_prose_renders_as_the_text(text: str) -> None:
    rendered = commonmark(escape(text))
    assert rendered.text == shown(text)
    assert not rendered.codes and set(rendered.tags) <= {"p"}


@given(hostile_text)
@example("wc -l inventory/*.py tests/*.py")
@settings(max_examples=400)
def test_a_code_span_renders_as_the_text(text: str) -> None:
    rendered = commonmark("before " + code_span(text) + " after")
    assert rendered.codes == [one_line(text) or "\xa0"]
    assert rendered.text == "before after"


@given(hostile_text, hostile_text, hostile_text)
@settings(max_examples=300)
def test_hostile_arguments_cannot_add_to_the_current_details(
    call_id: str, command: str, model: str
) -> None:
    for status in (TaskStatus.PAUSED, TaskStatus.RUNNING):
        benign = commonmark(current_details(task_view(status, "c", "ls", "m")))
        hostile = commonmark(current_details(task_view(status, call_id, command, model)))
        # Everything outside the code spans is ours; the arguments show literally.
        assert hostile.text == benign.text
        assert hostile.tags == benign.tags
        preview = one_line(arguments_preview("bash", {"command": command}, limit=200))
        assert preview in hostile.codes


def test_the_paused_details_read_right() -> None:
    details = current_details(task_view(TaskStatus.PAUSED, "call_0_0", "wc -l inventory/*.py"))
    rendered = commonmark(details)
    assert rendered.text == (
        "Waiting for approval of 1 tool call · pause · rejected automatically after 600s "
        "Approve: (or name call ids) · reject: Turn 2 of 50 · model"
    )
    assert rendered.codes == [
        "pause-2-abcd",
        "call_0_0",
        "bash · wc -l inventory/*.py",
        # --pause: a decision pasted after the task paused again decides nothing
        "subagents approve subagent-careful-0123 --all --pause pause-2-abcd",
        "subagents reject subagent-careful-0123 --all --pause pause-2-abcd --reason TEXT",
        "m",
    ]


def test_the_running_details_say_what_runs() -> None:
    view = task_view(TaskStatus.RUNNING, "c", "sleep 400")
    view.queued = 2
    rendered = commonmark(current_details(view))
    assert rendered.text == (
        "Running turn 2 of 50 · model 1 tool call running 2 waiting for a free slot"
    )
    assert rendered.codes == ["m", "bash · sleep 400"]
    view.running, view.queued, view.waiting_for_model, view.model = [], 0, True, "default"
    assert commonmark(current_details(view)).text == (
        "Running turn 2 of 50 · model the worker's default Waiting for the model's answer"
    )
    view.status = TaskStatus.COMPLETED
    assert current_details(view) == ""


@given(hostile_text, hostile_text, hostile_text)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_static_summary_and_details_show_the_text(
    description: str, prompt: str, workspace: str
) -> None:
    task_input = TaskInput(
        agent=AgentSpec(name="general", tools=["bash", "read_file"]),
        prompt=prompt or "x",
        description=description,
        workspace=workspace or None,
        model="openai:gpt-4.1-mini",
    )
    assert commonmark(static_summary(task_input)).text == shown(description)
    details = commonmark(static_details(task_input, "subagent-general-0123"))
    assert (one_line(prompt or "x", limit=300) or "\xa0") in details.codes
    if workspace:
        assert (one_line(workspace) or "\xa0") in details.codes
    assert set(details.tags) <= {"p", "strong", "code"}
    assert "Prompt" in details.text and "Approve" not in details.text


def test_static_details_of_a_task_on_the_workers_default_model() -> None:
    task_input = TaskInput(agent=AgentSpec(name="explore"), prompt="look")
    details = commonmark(static_details(task_input, "t"))
    assert "Model the worker's default () · max turns 50" in details.text
    assert "SUBAGENTS_MODEL" in details.codes


# ------------------------------------------------------------------ watch's summaries


@given(
    st.sampled_from(["bash", "read_file", "grep", "spawn_subagent"]),
    hostile_text,
    st.integers(min_value=1, max_value=10_000),
    hostile_text,
)
@settings(max_examples=300)
def test_watch_reads_tool_and_turn_back_from_hostile_summaries(
    tool: str, argument: str, turn: int, model: str
) -> None:
    summary = arguments_preview(tool, {"command": argument})
    assert _tool_of(summary) == tool
    assert summary.startswith(tool)
    assert _turn_of(f"turn {turn} · {model}") == turn
    # the model that answered replaces what the schedule said, whatever it was
    named = _turn_summary(f"turn {turn} · default", {"model": "openai:gpt-4.1-mini"})
    assert named == f"turn {turn} · openai:gpt-4.1-mini"
    assert _turn_summary(f"turn {turn} · {model}", None) == f"turn {turn} · {model}"


def test_turn_of_refuses_what_is_no_turn_summary() -> None:
    assert _turn_of("turn ² · x") is None
    assert _turn_of("bash · turn 3 · x") is None
    assert _turn_of("turn 3x · m") is None


def test_the_web_ui_list_of_paused_tasks() -> None:
    assert tasks_query(status="paused") == 'SubagentStatus="paused"'
    assert tasks_query(status="paused", agent="explore") == (
        'SubagentStatus="paused" AND SubagentAgent="explore"'
    )
    url = web_ui_tasks_url("http://127.0.0.1:8233/", "my ns", tasks_query(status="paused"))
    assert url == (
        "http://127.0.0.1:8233/namespaces/my%20ns/workflows?query=SubagentStatus%3D%22paused%22"
    )
