"""The worker keeps each task's latest conversation: a turn reads no chain back."""

from __future__ import annotations

from pathlib import Path

from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.storage._transcript import Transcript
from durable_subagents.types import Message


class CountingStore(LocalBlobStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gets = 0

    async def get(self, task_id: str, ref: str) -> bytes:
        self.gets += 1
        return await super().get(task_id, ref)


async def turns(transcript: Transcript, tasks: int, count: int) -> dict[str, str]:
    """``count`` turns of ``tasks`` tasks, interleaved as a busy worker runs them."""
    heads: dict[str, str] = {}
    for turn in range(count):
        for t in range(tasks):
            task_id = f"task-{t}"
            head = heads.get(task_id)
            before = await transcript.load(task_id, head)
            assert len(before) == 2 * turn
            new = [
                Message(role="user", content=f"{task_id} turn {turn}"),
                Message(role="assistant", content="x" * 500),
            ]
            heads[task_id] = await transcript.append(task_id, head, new)
    return heads


async def test_a_thousand_tasks_read_no_chain_back(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    heads = await turns(Transcript(store), tasks=1000, count=5)
    assert store.gets == 0
    # a fresh reader (another worker) reads the chain from the store, the same
    other = Transcript(store)
    messages = await other.load("task-7", heads["task-7"])
    assert [m.content for m in messages[::2]] == [f"task-7 turn {t}" for t in range(5)]
    assert store.gets == 5


async def test_a_small_cache_evicts_and_reads_back_right(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    transcript = Transcript(store, cache_bytes=36_000)  # a dozen tasks' worth
    heads = await turns(transcript, tasks=50, count=4)
    assert store.gets > 0  # evicted tasks were read back from the store
    assert transcript._cached <= 36_000
    for t in (0, 49):
        messages = await transcript.load(f"task-{t}", heads[f"task-{t}"])
        assert [m.content for m in messages[::2]] == [f"task-{t} turn {n}" for n in range(4)]


async def test_the_cache_counts_what_it_holds_in_memory(tmp_path: Path) -> None:
    """Its bound is on memory: the estimate is within a third of what tracemalloc sees,
    and a short message takes a few hundred bytes of it (parsed, it would take 1.3 KB)."""
    import tracemalloc

    from durable_subagents.types import ToolCall

    transcript = Transcript(LocalBlobStore(tmp_path))
    # Only what this test, the transcript and pydantic allocate: a process that ran
    # other tests may have threads of theirs allocating meanwhile.
    mine = [
        tracemalloc.Filter(True, __file__),
        tracemalloc.Filter(True, "*/storage/_transcript.py"),
        tracemalloc.Filter(True, "*/pydantic/*"),
    ]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(mine)
        for t in range(300):
            task_id = f"task-{t}"
            head = await transcript.append(
                task_id,
                None,
                [
                    Message(role="system", content="You explore code. " * 40),
                    Message(role="user", content=f"Read f.txt for {task_id}"),
                ],
            )
            for turn in range(5):
                call = ToolCall(id=f"call-{t}-{turn}", name="read_file", arguments={"path": "f"})
                new = [
                    Message(role="assistant", content="", tool_calls=[call]),
                    Message(role="tool", content="     1\tx\n", tool_call_id=call.id),
                ]
                # as a worker gets them: parsed from a payload, not shared objects
                new = [Message.model_validate_json(m.model_dump_json()) for m in new]
                head = await transcript.append(task_id, head, new)
        after = tracemalloc.take_snapshot().filter_traces(mine)
        held = sum(d.size_diff for d in after.compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    estimate = transcript._cached
    assert 0.66 * held < estimate < 1.5 * held, (estimate, held)
    messages = 300 * 12
    assert held / messages < 400, held / messages


async def test_turns_another_worker_added_are_read_back_before_the_cached_ones(
    tmp_path: Path,
) -> None:
    store = CountingStore(tmp_path)
    mine, other = Transcript(store), Transcript(store)
    head = None
    for turn in range(3):
        head = await mine.append("t", head, [Message(role="user", content=f"turn {turn}")])
    # the task moves to another worker for two turns, then comes back
    await other.load("t", head)
    gets = store.gets
    for turn in range(3, 5):
        head = await other.append("t", head, [Message(role="user", content=f"turn {turn}")])
    messages = await mine.load("t", head)
    assert [m.content for m in messages] == [f"turn {t}" for t in range(5)]
    assert store.gets - gets == 2  # the two new nodes; the first three came from the cache
    again = await mine.load("t", head)
    assert [m.content for m in again] == [f"turn {t}" for t in range(5)]
    assert store.gets - gets == 2
