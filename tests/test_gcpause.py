"""The collector's pause around compilation steps (`adcompiler.ir.gcpause`)."""
from __future__ import annotations

import gc

import pytest

from adcompiler.ir import gcpause
from adcompiler.ir.gcpause import collector_paused, fewer_collections


class Cycle:
    def __init__(self):
        self.me = self


def test_the_collector_is_paused_inside_and_runs_again_after():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():   # nested: still paused, and left paused
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_inside_restores_the_collector():
    with pytest.raises(ZeroDivisionError):
        with collector_paused():
            1 / 0
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def in_generation(obj, generation: int) -> bool:
    return any(o is obj for o in gc.get_objects(generation))


@pytest.mark.parametrize("many", [True, False])
def test_a_big_step_moves_its_objects_to_the_oldest_generation(monkeypatch, many):
    import weakref
    monkeypatch.setattr(gcpause, "MOVE_AFTER", 1000)
    gc.collect()
    with collector_paused():
        probe = Cycle()
        alive = weakref.ref(probe)
        del probe               # garbage, in a cycle: only the collector frees it
        kept = [Cycle() for _ in range(2000 if many else 10)]
    assert alive() is not None  # not examined yet: the next full collection frees it
    assert in_generation(kept[0], 2) == many and in_generation(kept[-1], 0) != many
    if many:
        assert gc.get_count()[0] < 1000
    gc.collect()
    assert alive() is None
    assert all(c.me is c for c in kept)


def big_step(size: int):
    """A paused step that leaves `size` objects and one garbage cycle; a weak reference to
    the cycle."""
    import weakref
    with collector_paused():
        probe = Cycle()
        alive = weakref.ref(probe)
        del probe
        kept = [Cycle() for _ in range(size)]  # noqa: F841
    return alive


def test_steps_move_less_than_twice_the_largest_between_full_collections(monkeypatch):
    monkeypatch.setattr(gcpause, "MOVE_AFTER", 1000)
    gc.collect()
    first = big_step(2000)
    second = big_step(4000)          # larger than all moved since the last full collection
    assert first() is not None and second() is not None
    third = big_step(3000)           # smaller: this step runs a full collection instead
    assert first() is None and second() is None and third() is None
    fourth = big_step(2000)          # after a full collection, a step moves again
    assert fourth() is not None
    gc.collect()
    assert fourth() is None


def test_objects_the_caller_froze_stay_frozen(monkeypatch):
    import weakref
    monkeypatch.setattr(gcpause, "MOVE_AFTER", 1000)
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            probe = Cycle()
            alive = weakref.ref(probe)
            del probe
            kept = [Cycle() for _ in range(2000)]
        assert gc.get_freeze_count() == frozen  # a full collection ended the step instead
        assert alive() is None and in_generation(kept[0], 2)
    finally:
        gc.unfreeze()


def test_fewer_collections_restores_the_thresholds():
    old = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold()[0] >= gcpause.YOUNG
    assert gc.get_threshold() == old


def test_a_pipeline_runs_with_the_collector_paused(monkeypatch):
    import adcompiler as adc
    from adcompiler.passes import pipeline
    seen = []
    real = pipeline.apply_pass

    def spy(p, module, owned):
        seen.append(gc.isenabled())
        return real(p, module, owned)
    monkeypatch.setattr(pipeline, "apply_pass", spy)
    m = adc.parse_tdsl("def f(x: f64[3]) -> f64 {\n    return sum(tanh(x))\n}\n", "<t>")
    adc.run_pipeline(m, "inline,cse,dce")
    assert seen and not any(seen) and gc.isenabled()
