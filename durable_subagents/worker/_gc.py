"""The cyclic garbage collector of a process that runs a worker."""

from __future__ import annotations

import gc


def collect_less(threshold: int) -> None:
    """Tune Python's cyclic garbage collector for a long-running worker process.

    Call it once the worker polls, its imports done (``run_worker`` does; so does
    ``subagents dev``). It collects once, then moves every object alive (modules,
    classes, the SDKs' schemas: about 150,000 objects) into the permanent generation,
    which no later collection traverses (``gc.freeze()``), and lets ``threshold`` new
    objects accumulate between young collections where Python waits for 700.

    Reference counting frees almost all of a turn's objects; the collector only finds
    cycles. With Python's threshold, the objects that outlive a model call are promoted
    to the oldest generation, and each 25 % growth of it starts a full collection that
    traverses every running task's state: 6 s of the 80 s of CPU a worker spent on 1,000
    tasks (``bench/bench_scale.py``), 0.3 s with a threshold of 50,000, for 7 % more peak
    memory (the cycles wait longer).

    Args:
        threshold: New objects between young collections (``gc.set_threshold``'s
            first); 0 leaves the collector as Python set it. The older generations'
            thresholds stay Python's.
    """
    if threshold <= 0:
        return
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(threshold, middle, oldest)
