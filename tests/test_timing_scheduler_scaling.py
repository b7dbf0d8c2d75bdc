"""The timing scheduler's dependency look-up on a tensor accessed in many pieces (its per-location box index,
``boxes.BoxIndex``) finds what a brute-force O(n^2) reading of the access rules finds."""
import random

import pytest

from nki_kernels.simulator.timing import Instr, Scheduler
from nki_kernels.simulator.timing.boxes import BoxIndex
from nki_kernels.simulator.timing import model as tmodel

N = 600
COLS = 4096


def _boxes(seed):
    rng = random.Random(seed)
    out = []
    for i in range(N):
        r = rng.random()
        if r < 0.45:  # one column, as a column-at-a-time store loop writes
            c = rng.randrange(COLS)
            box = ((0, 128), (c, c + 1))
        elif r < 0.7:  # a few columns, overlapping the pieces around them
            c = rng.randrange(COLS - 40)
            box = ((0, 128), (c, c + rng.randrange(1, 40)))
        elif r < 0.8:  # part of the rows: overlaps only where both axes do
            p = rng.randrange(0, 120)
            c = rng.randrange(COLS - 8)
            box = ((p, p + rng.randrange(1, 8)), (c, c + rng.randrange(1, 8)))
        elif r < 0.85:  # a wide range (kept among the boxes always tested)
            c = rng.randrange(COLS // 2)
            box = ((0, 128), (c, c + rng.randrange(500, COLS // 2)))
        elif r < 0.9 and out:  # the same region again
            box = rng.choice(out)[1]
        elif r < 0.93:
            box = None  # the whole tensor
        elif r < 0.96:  # an empty range
            c = rng.randrange(COLS)
            box = ((0, 128), (c, c))
        else:  # another rank
            c = rng.randrange(COLS)
            box = ((c, c + 3),)
        wide = box is None or (len(box) == 2 and box[1][1] - box[1][0] >= 500)
        # (a write?, its box): whole-tensor and wide writes are rare, as each one empties the tables
        out.append((rng.random() < (0.1 if wide else 0.5), box))
    return out


def _key(box):
    return ("hbm", "out") if box is None else ("hbm", "out", box)


def _events(plan):
    evs = []
    for i, (write, box) in enumerate(plan):
        own = ("sbuf", ("own", i), ((0, 128), (0, 4)))  # (no dependencies of its own)
        reads, writes = ((own,), (_key(box),)) if write else ((_key(box),), (own,))
        evs.append(Instr("dma_copy", "DMA", partitions=128, nbytes=512 * (1 + i % 5), reads=reads,
                         writes=writes, queue=i % 3))
    return evs


def _overlap(a, b):
    if a is None or b is None or a == b or len(a) != len(b):
        return True
    return all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(a, b))


def _contains(outer, inner):
    if outer is None or outer == inner:
        return True
    if inner is None or len(outer) != len(inner):
        return False
    return all(o0 <= i0 and i1 <= o1 for (o0, o1), (i0, i1) in zip(outer, inner))


def _reference(plan, end):
    """Each event's dependencies on the tensor ``(earlier event, kind)``, from every pair of events: a
    writer is live until a later write contains its box; of the reads of one box since then, the one
    recorded is the first with the latest end."""
    out = []
    for i, (write, q) in enumerate(plan):
        def killed(j, b):
            return any(plan[m][0] and _contains(plan[m][1], b) for m in range(j + 1, i))
        deps = []
        for j in range(i):
            wj, b = plan[j]
            if not _overlap(b, q) or killed(j, b):
                continue
            if wj:
                deps.append((j, "WAW" if write else "RAW"))
            elif write:
                same = [m for m in range(j, i) if not plan[m][0] and plan[m][1] == b]
                best = max(end[m] for m in same)
                if j == min(m for m in same if end[m] == best):
                    deps.append((j, "WAR"))
        out.append(sorted(deps))
    return out


def _run(evs, monkeypatch):
    found = []
    real = Scheduler._deps

    def spy(self, reads, writes):
        res = real(self, reads, writes)
        found.append(list(res[0]))
        return res

    monkeypatch.setattr(Scheduler, "_deps", spy)
    s = Scheduler(2)
    for e in evs:
        s.add(e)
    monkeypatch.setattr(Scheduler, "_deps", real)
    return s, found


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_many_pieces_match_brute_force(seed, monkeypatch):
    plan = _boxes(seed)
    s, found = _run(_events(plan), monkeypatch)
    assert isinstance(s._acc[("hbm", "out")][2], BoxIndex)  # (the index was in use)
    got = [sorted((j, why) for _, j, why in deps) for deps in found]
    ref = _reference(plan, s.end)
    assert sum(map(len, ref)) > N  # (dependencies were found at all)
    for i, (g, r) in enumerate(zip(got, ref)):
        assert g == r, f"event {i} {plan[i]}"


@pytest.mark.parametrize("seed", [3])
def test_index_keeps_the_scan_order(seed, monkeypatch):
    # the order of the dependencies picks the cause among equal times: the same as without the index
    evs = _events(_boxes(seed))
    s, found = _run(evs, monkeypatch)
    monkeypatch.setattr(tmodel, "_INDEX_AT", 10 ** 9)
    plain, plain_found = _run(evs, monkeypatch)
    assert plain._acc[("hbm", "out")][2] is None
    assert found == plain_found
    assert (s.start, s.end, s.pred, s.cause) == (plain.start, plain.end, plain.pred, plain.cause)
