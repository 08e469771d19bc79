"""The compiled training step against torch.optim, step by step in float64: the same initial
values, the same mini-batches, 50 steps; parameters, loss, gradient norms and learning rate
agree to rtol 1e-10."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc

torch = pytest.importorskip("torch")
F = torch.nn.functional

MLP = "samples/mlp.tdsl"
STEPS = 50


def data(seed: int = 0, rows: int = 64):
    rng = np.random.default_rng(seed)
    params = {"W1": rng.normal(size=(4, 8)) * 0.5, "b1": rng.normal(size=8) * 0.1,
              "W2": rng.normal(size=(8, 3)) * 0.5, "b2": np.zeros(3)}
    x = rng.normal(size=(rows, 4))
    labels = rng.integers(0, 3, size=rows)
    return params, x, labels


def batches(x, labels, size: int = 16, steps: int = STEPS, seed: int = 1):
    order = np.random.default_rng(seed)
    for _ in range(steps):
        idx = order.choice(len(x), size=size, replace=False)
        yield {"x": x[idx], "labels": labels[idx]}


def mlp_loss(p, b):
    h = torch.relu(b["x"] @ p["W1"] + p["b1"])
    return F.cross_entropy(h @ p["W2"] + p["b2"], b["labels"])


def torch_run(params, make_opt, batch_list, clip=None, make_sched=None, loss_fn=mlp_loss):
    """Per step: loss, total gradient norm (before clipping), lr used, parameters after."""
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    opt = make_opt(list(p.values()))
    sched = make_sched(opt) if make_sched else None
    out = []
    for b in batch_list:
        tb = {k: torch.tensor(v) for k, v in b.items()}
        opt.zero_grad()
        loss = loss_fn(p, tb)
        loss.backward()
        grads = [q.grad.detach().clone() for q in p.values()]
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(list(p.values()), clip)
        else:
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g)
                                                         for g in grads]))
        lr = opt.param_groups[0]["lr"]
        opt.step()
        if sched:
            sched.step()
        out.append((loss.item(), norm.item(), lr,
                    {k: v.detach().numpy().copy() for k, v in p.items()}))
    return out


def adc_run(params, optimizer, batch_list, clip=None, program=MLP, accumulate=1):
    step = adc.train_step(program, optimizer, clip=clip, dtype="f64", accumulate=accumulate)
    state = step.init(params)
    p = params
    out = []
    for b in batch_list:
        p, state, m = step(p, state, b)
        out.append((float(m["loss"]), float(m["grad_norm"]), float(m["lr"]),
                    {k: v.copy() for k, v in p.items()}))
    return out


def assert_same_run(got, want, rtol=1e-10):
    assert len(got) == len(want)
    for k, ((l1, n1, lr1, p1), (l2, n2, lr2, p2)) in enumerate(zip(got, want)):
        np.testing.assert_allclose(l1, l2, rtol=rtol, err_msg=f"loss at step {k}")
        np.testing.assert_allclose(n1, n2, rtol=rtol, err_msg=f"grad norm at step {k}")
        np.testing.assert_allclose(lr1, lr2, rtol=rtol, atol=1e-15, err_msg=f"lr at step {k}")
        for name in p2:
            np.testing.assert_allclose(p1[name], p2[name], rtol=rtol, atol=1e-14,
                                       err_msg=f"{name} after step {k}")


OPTIMIZERS = {
    "sgd": (adc.optim.sgd(0.1), lambda ps: torch.optim.SGD(ps, lr=0.1, foreach=False)),
    "sgd-momentum": (adc.optim.sgd(0.1, momentum=0.9),
                     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=False)),
    "sgd-dampening-wd": (
        adc.optim.sgd(0.05, momentum=0.8, dampening=0.3, weight_decay=0.01),
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, dampening=0.3,
                                   weight_decay=0.01, foreach=False)),
    "sgd-nesterov": (adc.optim.sgd(0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
                     lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True,
                                                weight_decay=1e-3, foreach=False)),
    "adam": (adc.optim.adam(1e-2), lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=False)),
    "adam-options": (
        adc.optim.adam(3e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05),
        lambda ps: torch.optim.Adam(ps, lr=3e-2, betas=(0.8, 0.99), eps=1e-6,
                                    weight_decay=0.05, foreach=False)),
    "adamw": (adc.optim.adamw(1e-2), lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=False)),
    "adamw-decay": (adc.optim.adamw(2e-2, weight_decay=0.3),
                    lambda ps: torch.optim.AdamW(ps, lr=2e-2, weight_decay=0.3,
                                                 foreach=False)),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_matches_torch(name):
    ours, theirs = OPTIMIZERS[name]
    params, x, labels = data()
    bl = list(batches(x, labels))
    assert_same_run(adc_run(params, ours, bl), torch_run(params, theirs, bl))


@pytest.mark.parametrize("name", ["sgd-momentum", "adam"])
def test_clipping_matches_clip_grad_norm(name):
    ours, theirs = OPTIMIZERS[name]
    params, x, labels = data(seed=3)
    bl = list(batches(x, labels))
    want = torch_run(params, theirs, bl, clip=0.3)
    assert any(n > 0.3 for _, n, _, _ in want)  # clipping is active
    assert_same_run(adc_run(params, ours, bl, clip=0.3), want)


def test_defaults_are_torchs():
    sgd, adam, adamw = adc.optim.sgd(0.1), adc.optim.adam(), adc.optim.adamw()
    t = torch.nn.Parameter(torch.zeros(1))
    for ours, theirs in ((sgd, torch.optim.SGD([t], lr=0.1)), (adam, torch.optim.Adam([t])),
                         (adamw, torch.optim.AdamW([t]))):
        d = theirs.defaults
        assert ours.lr.lr == d["lr"] and ours.weight_decay == d["weight_decay"]
        if ours.kind == "sgd":
            assert (ours.momentum, ours.dampening, ours.nesterov) == \
                (d["momentum"], d["dampening"], d["nesterov"])
        else:
            assert ours.betas == tuple(d["betas"]) and ours.eps == d["eps"]


SCHEDULES = {
    "warmup": (adc.optim.warmup(0.1, 10, start_factor=0.25),
               lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25,
                                                           total_iters=10)),
    "cosine": (adc.optim.cosine(0.1, 40, min_lr=1e-3),
               lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=40,
                                                                    eta_min=1e-3)),
    "warmup-cosine": (
        adc.optim.cosine(0.1, 45, warmup=5, start_factor=0.1),
        lambda o: torch.optim.lr_scheduler.SequentialLR(o, [
            torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=5),
            torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=40)], milestones=[5])),
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", SCHEDULES)
def test_schedule_matches_lr_scheduler(name):
    ours, theirs = SCHEDULES[name]
    params, x, labels = data(seed=5)
    bl = list(batches(x, labels))
    want = torch_run(params, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                        foreach=False), bl, make_sched=theirs)
    got = adc_run(params, adc.optim.sgd(ours, momentum=0.9), bl)
    assert_same_run(got, want)
    assert [ours(t) for t in range(STEPS)] == pytest.approx([w[2] for w in want], rel=1e-12,
                                                            abs=1e-15)


def test_adam_with_cosine_schedule():
    params, x, labels = data(seed=6)
    bl = list(batches(x, labels))
    want = torch_run(params, lambda ps: torch.optim.Adam(ps, lr=0.02, foreach=False), bl,
                     make_sched=lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 50))
    got = adc_run(params, adc.optim.adam(adc.optim.cosine(0.02, 50)), bl)
    assert_same_run(got, want)


EDGE = """
def edge(x: f64[B, 1], y: f64[B], param w: f64[1, 1], param s: f64, param c: f64[1]) -> f64 {
    z = reshape(x @ w, [-1]) * s + c
    return mean((z - y) * (z - y))
}
"""


def edge_loss(p, b):
    z = (b["x"] @ p["w"]).reshape(-1) * p["s"] + p["c"]
    return torch.mean((z - b["y"]) ** 2)


@pytest.mark.parametrize("name", ["sgd-nesterov", "adamw-decay"])
def test_zero_d_and_size_one_params(name):
    ours, theirs = OPTIMIZERS[name]
    rng = np.random.default_rng(2)
    params = {"w": rng.normal(size=(1, 1)), "s": np.float64(0.7), "c": np.array([0.1])}
    x = rng.normal(size=(40, 1))
    y = 2.0 * x[:, 0] + 0.5
    bl = []
    for _ in range(STEPS):
        idx = rng.choice(40, size=8, replace=False)
        bl.append({"x": x[idx], "y": y[idx]})
    want = torch_run(params, theirs, bl, clip=1.0, loss_fn=edge_loss)
    assert_same_run(adc_run(params, ours, bl, clip=1.0, program=EDGE), want)
