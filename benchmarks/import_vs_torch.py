"""adc.from_torch against PyTorch in float64: the figures behind tests/model_import.

For each module of tests/model_import/torch_models.py: the largest relative error of the
forward output and of the parameter gradients of a cross-entropy loss against
torch.autograd, then 50 Adam steps (lr 1e-2) taken by both, with the largest difference of
their losses relative to max(loss, 1e-3) (as the tests take it); for the CNN trained in train mode also the running statistics
after those steps and the evaluation-mode output (model.eval()) with them.

    python benchmarks/import_vs_torch.py            # prints a markdown table
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

import adcompiler as adc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "model_import"))
from torch_models import CNN, MLP, EncoderBlock, GPTBlock, TrainCNN  # noqa: E402

F = torch.nn.functional
STEPS = 50


def rel(a, b) -> float:
    b = np.asarray(b)
    return float(np.max(np.abs(np.asarray(a) - b)) / max(np.max(np.abs(b)), 1e-300))


def _case(name):
    g = torch.Generator().manual_seed(1)
    torch.manual_seed(0)
    if name == "mlp":
        return MLP().double().eval(), torch.randn(5, 6, generator=g, dtype=torch.float64), 4
    if name == "cnn (eval)":
        m = CNN().double().eval()
        with torch.no_grad():
            for mod in m.modules():
                if isinstance(mod, torch.nn.BatchNorm2d):
                    mod.running_mean.uniform_(-0.5, 0.5)
                    mod.running_var.uniform_(0.5, 2.0)
        return m, torch.randn(2, 3, 10, 10, generator=g, dtype=torch.float64), 5
    if name == "encoder":
        return EncoderBlock().double().eval(), torch.randn(2, 5, 16, generator=g,
                                                           dtype=torch.float64), 3
    if name == "gpt":
        return GPTBlock().double().eval(), torch.randint(0, 20, (2, 8), generator=g), 20
    return TrainCNN().double().train(), torch.randn(4, 3, 10, 10, generator=g,
                                                    dtype=torch.float64), 5


def _loss(m, x, target):
    out = m(x)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))


def measure(name) -> dict:
    m, x, classes = _case(name)
    g = torch.Generator().manual_seed(2)
    target = torch.randint(0, classes, m(x).shape[:-1], generator=g)
    imp = adc.from_torch(m, (x,), loss="cross_entropy")
    fig = {}
    inputs = {**imp.params, **imp.state, imp.inputs[0]: x.numpy()}
    if not imp.state:   # an evaluation-mode module: one forward and gradient
        out = adc.run(imp.module, imp.fn, inputs)[0]
        fig["forward"] = rel(out, m(x).detach().numpy())
        _, grads = adc.value_and_grad(imp.module, "loss", wrt=imp.trained)(
            **inputs, target=target.numpy())
        _loss(m, x, target).backward()
        by_name = imp.to_state_dict(dict(zip(imp.trained, grads)))
        fig["gradients"] = max(rel(by_name[k], p.grad.numpy()) for k, p in m.named_parameters())
        m.zero_grad()
    step = adc.train_step(imp.module, adc.optim.adam(1e-2), fn="loss", wrt=imp.trained)
    params = {k: imp.params[k].copy() for k in imp.trained}
    state = step.init(params, model_state=imp.state)
    batch = {imp.inputs[0]: x.numpy(), "target": target.numpy(),
             **{k: imp.params[k] for k in imp.constants}}
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    worst, t0 = 0.0, time.time()
    for _ in range(STEPS):
        params, state, metrics = step(params, state, batch)
        opt.zero_grad()
        ref = _loss(m, x, target)
        ref.backward()
        opt.step()
        # relative to the loss, or to 1e-3 once a model fits its batch (losses near 0)
        worst = max(worst, abs(float(metrics["loss"]) - ref.item()) / max(ref.item(), 1e-3))
    fig["adam losses"] = worst
    fig["seconds"] = time.time() - t0
    if imp.state:
        buffers = imp.to_state_dict({k: state[k] for k in imp.state})
        fig["running stats"] = max(rel(buffers[k], b.numpy()) for k, b in m.named_buffers())
        m.eval()
        out = adc.run(imp.module, imp.fn, {**params, **{k: state[k] for k in imp.state},
                                           imp.inputs[0]: x.numpy()})[0]
        fig["eval forward"] = rel(out, m(x).detach().numpy())
    return fig


def main() -> int:
    cols = ["forward", "gradients", "adam losses", "running stats", "eval forward"]
    print("| module | " + " | ".join(f"max rel. {c}" for c in cols) + " | 50 steps (s) |")
    print("|---" * (len(cols) + 2) + "|")
    for name in ["mlp", "cnn (eval)", "encoder", "gpt", "cnn (train mode)"]:
        fig = measure(name)
        cells = [f"{fig[c]:.1e}" if c in fig else "-" for c in cols]
        print(f"| {name} | " + " | ".join(cells) + f" | {fig['seconds']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
