"""output/stepcache.py: the iterators of one opened output share its mapped shards and each
step's plan; a controller serving every rank from one process gets the batches each rank's
own process would; the cache is bounded and pickles empty."""
from __future__ import annotations

import pickle

from test_batches import BUDGET, out4  # noqa: F401  (the 4-shard output fixture)

from rollout_cli.output import partition, stepcache
from rollout_cli.output.batches import BatchIterator
from rollout_cli.output.model import open_output


def rows_of(b) -> list:
    return [b.step, b.micro_batch_index, b.rollout_positions.tolist(), b.tokens.tolist(), b.loss_mask.tolist()]


def test_a_controller_serving_every_rank_gets_what_each_ranks_process_gets(out4):  # noqa: F811
    w = 3
    alone = [[rows_of(b) for b in open_output(out4).iter_batches(r, world_size=w, max_tokens=BUDGET)]
             for r in range(w)]
    o = open_output(out4)
    its = [o.iter_batches(r, world_size=w, max_tokens=BUDGET) for r in range(w)]
    together = [[] for _ in range(w)]
    for group in zip(*its):  # micro-batch k of every rank, step after step
        for r, b in enumerate(group):
            together[r].append(rows_of(b))
    assert together == alone


def test_each_step_is_planned_once_and_each_shard_read_once_per_output(out4, monkeypatch):  # noqa: F811
    plans, reads = [], []
    real_plan, real_read = partition.plan_step, BatchIterator._piece.__globals__["read_shard"]
    monkeypatch.setattr(partition, "plan_step", lambda *a, **k: plans.append(1) or real_plan(*a, **k))
    monkeypatch.setitem(BatchIterator._piece.__globals__, "read_shard",
                        lambda out, step, r, *a: reads.append((step, r)) or real_read(out, step, r, *a))
    o = open_output(out4)
    its = [o.iter_batches(r, world_size=3, max_tokens=BUDGET) for r in range(3)]
    for _ in zip(*its):
        pass
    steps = o.step_numbers()
    assert len(plans) == len(steps)
    assert sorted(reads) == sorted((s, r) for s in steps for r in range(4))
    # another output object shares nothing
    list(open_output(out4).iter_batches(0, world_size=3, max_tokens=BUDGET))
    assert len(plans) == 2 * len(steps)


def test_the_cache_is_bounded_and_pickles_empty():
    c = stepcache.StepCache()
    for step in range(5):
        for shard in range(3):
            assert c.piece(("train", step, "auto"), shard, lambda: (step, shard)) == (step, shard)
    assert list(c._pieces) == [("train", s, "auto") for s in range(5 - stepcache.STEPS_KEPT, 5)]
    assert c.piece(("train", 4, "auto"), 0, lambda: "again") == (4, 0)  # held: not read again
    assert c.piece(("train", 4, "auto"), 0, lambda: "again", fresh=True) == "again"  # a digest check reads anew
    made = []
    for _ in range(2):
        assert c.plan(("k",), lambda: made.append(1) or "plan") == "plan"
    assert made == [1]
    back = pickle.loads(pickle.dumps(c))
    assert isinstance(back, stepcache.StepCache) and not back._pieces and not back._plans



def test_a_forked_child_gets_fresh_locks():
    import os

    c = stepcache.StepCache()
    c._lock.acquire()  # as if another thread held it at the fork
    try:
        pid = os.fork()
        if pid == 0:  # the child: the cache answers instead of waiting forever
            import signal

            signal.alarm(20)  # a lock inherited held would hang: die instead
            ok = c.plan(("k",), lambda: "made") == "made"
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        c._lock.release()


def test_with_its_switch_off_each_iterator_has_a_cache_of_its_own_and_serves_the_same(out4, monkeypatch):  # noqa: F811
    o = open_output(out4)
    assert stepcache.of(o) is stepcache.of(o)
    shared = [[rows_of(b) for b in o.iter_batches(r, world_size=3, max_tokens=BUDGET)] for r in range(3)]
    monkeypatch.setenv("ROLLOUT_CLI_STEP_CACHE", "0")
    o = open_output(out4)
    assert stepcache.of(o) is not stepcache.of(o)
    own = [[rows_of(b) for b in o.iter_batches(r, world_size=3, max_tokens=BUDGET)] for r in range(3)]
    assert own == shared
