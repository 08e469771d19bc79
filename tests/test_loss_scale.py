"""Dynamic loss scaling follows torch.amp.GradScaler: start at 2**16, halve and skip on an
Inf or NaN, double after `growth_interval` clean steps in a row."""
import math

import pytest

from adcompiler.training.loss_scale import LossScaler


def test_rules_by_hand():
    s = LossScaler()
    assert s.scale == 2.0 ** 16 and s.growth_interval == 2000
    for _ in range(1999):
        s.update(False)
    assert s.scale == 2.0 ** 16
    s.update(False)                      # the 2000th clean step doubles
    assert s.scale == 2.0 ** 17 and s.growth_tracker == 0
    for _ in range(1500):
        s.update(False)
    s.update(True)                       # an overflow halves and restarts the count
    assert s.scale == 2.0 ** 16 and s.growth_tracker == 0
    for _ in range(1999):
        s.update(False)
    assert s.scale == 2.0 ** 16
    s.update(False)
    assert s.scale == 2.0 ** 17


def test_growth_stops_short_of_overflow():
    s = LossScaler(scale=2.0 ** 1023, growth_interval=1)
    s.update(False)
    assert s.scale == 2.0 ** 1023 and math.isfinite(s.scale)


def test_state_round_trip():
    s = LossScaler()
    s.update(True)
    s.update(False)
    t = LossScaler()
    t.load_state(s.state())
    assert (t.scale, t.growth_tracker) == (2.0 ** 15, 1)


def test_matches_torch_grad_scaler():
    torch = pytest.importorskip("torch")
    pattern = [False, False, True, False, False, False, False, True, True, False, False,
               False, False, False, False, False]
    ref = torch.amp.GradScaler("cpu", growth_interval=3)
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.0)
    ours = LossScaler(growth_interval=3)
    for bad in pattern:
        opt.zero_grad()
        scale = torch.tensor([float("inf") if bad else 1.0])
        ref.scale((p * scale).sum()).backward()
        ref.step(opt)
        ref.update()
        ours.update(bad)
        assert ours.scale == ref.get_scale()
