"""adc.from_torch against PyTorch in float64: forward and gradients to 1e-10 relative, and
50 Adam steps whose losses follow PyTorch's to 1e-9."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import adcompiler as adc  # noqa: E402
from adcompiler.diagnostics import AdcError  # noqa: E402
from torch_models import CNN, MLP, EncoderBlock, GPTBlock  # noqa: E402


def _model(cls):
    torch.manual_seed(0)
    m = cls().double().eval()
    with torch.no_grad():   # non-trivial running statistics for the batch norms
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
    return m


CASES = {
    "mlp": (MLP, lambda g: torch.randn(5, 6, generator=g, dtype=torch.float64), 4),
    "cnn": (CNN, lambda g: torch.randn(2, 3, 10, 10, generator=g, dtype=torch.float64), 5),
    "encoder": (EncoderBlock, lambda g: torch.randn(2, 5, 16, generator=g,
                                                    dtype=torch.float64), 3),
    "gpt": (GPTBlock, lambda g: torch.randint(0, 20, (2, 8), generator=g), 20),
}


def _setup(name):
    cls, make_x, classes = CASES[name]
    g = torch.Generator().manual_seed(1)
    m, x = _model(cls), make_x(g)
    imp = adc.from_torch(m, (x,), loss="cross_entropy")
    shape = m(x).shape[:-1]
    target = torch.randint(0, classes, shape, generator=g)
    return m, x, target, imp


def _torch_loss(m, x, target):
    out = m(x)
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]),
                                             target.reshape(-1))


def _rel(a, b):
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_gradients_match_pytorch(name):
    m, x, target, imp = _setup(name)
    inputs = {**imp.params, imp.inputs[0]: x.numpy()}
    (out,) = adc.run(imp.module, imp.fn, inputs)
    assert _rel(out, m(x).detach().numpy()) < 1e-10
    trained = imp.trained
    loss, grads = adc.value_and_grad(imp.module, "loss", wrt=trained)(
        **inputs, target=target.numpy())
    ref = _torch_loss(m, x, target)
    ref.backward()
    assert abs(float(loss) - ref.item()) <= 1e-10 * abs(ref.item())
    by_path = imp.to_state_dict(dict(zip(trained, grads)))   # by the module's own names
    names = dict(m.named_parameters())
    assert set(by_path) == set(names)
    for k, p in names.items():
        assert _rel(by_path[k], p.grad.numpy()) < 1e-10, k


@pytest.mark.parametrize("name", ["mlp", "cnn", pytest.param("encoder", marks=pytest.mark.slow),
                                  pytest.param("gpt", marks=pytest.mark.slow)])
def test_fifty_adam_steps_follow_pytorch(name):
    m, x, target, imp = _setup(name)
    trained = imp.trained
    step = adc.train_step(imp.module, adc.optim.adam(1e-2), fn="loss", wrt=trained)
    params = {k: imp.params[k].copy() for k in trained}
    batch = {imp.inputs[0]: x.numpy(), "target": target.numpy(),
             **{k: v for k, v in imp.params.items() if k not in trained}}
    state = step.init(params)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for _ in range(50):
        params, state, metrics = step(params, state, batch)
        opt.zero_grad()
        ref = _torch_loss(m, x, target)
        ref.backward()
        opt.step()
        assert abs(float(metrics["loss"]) - ref.item()) <= 1e-9 * max(abs(ref.item()), 1e-3)


def test_dynamic_batch_becomes_a_symbolic_dim():
    m = MLP().double().eval()
    x = torch.randn(4, 6, dtype=torch.float64)
    imp = adc.from_torch(m, (x,), dynamic_shapes=({0: torch.export.Dim("B")},))
    assert "x: f64[B, 6]" in imp.source
    x7 = torch.randn(7, 6, dtype=torch.float64)
    (out,) = adc.run(imp.module, imp.fn, {**imp.params, "x": x7.numpy()})
    assert _rel(out, m(x7).detach().numpy()) < 1e-12


def test_comments_name_the_module_path():
    imp = adc.from_torch(MLP().eval(), (torch.randn(2, 6),))
    assert "# layers.0: aten.addmm.default" in imp.source


def test_export_failures_are_named():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x   # control flow on data: not exportable

    with pytest.raises(AdcError, match="DataDependent: torch.export cannot export"):
        adc.from_torch(DataDependent(), (torch.randn(3),))
    with pytest.raises(AdcError, match=r"Masked: node 'index' \(aten.index.Tensor\): error: op "
                                       r"'aten.index.Tensor' is not supported"):
        class Masked(torch.nn.Module):
            def forward(self, x):
                return x[x > 0]
        try:
            adc.from_torch(Masked(), (torch.randn(3),))
        except AdcError as e:
            from adcompiler.diagnostics import render
            raise AdcError(render(e)) from None


class _Pools(torch.nn.Module):
    def forward(self, x):
        F = torch.nn.functional
        y, i = F.max_pool2d(x, 3, 2, 1, (1, 2), True, return_indices=True)
        a = F.avg_pool2d(x, 2, ceil_mode=True, count_include_pad=False, divisor_override=3)
        z = F.max_pool2d(x, 2, dilation=2)
        return y.sum() + a.sum() + (z * z).sum(), i


def test_pooling_options_and_indices():
    """dilation, ceil_mode, return_indices (max_pool2d_indices), count_include_pad and
    divisor_override: the value, the indices and the gradient as PyTorch's."""
    x = torch.randn(2, 3, 7, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    imp = adc.from_torch(_Pools(), (x,))
    assert "max_pool2d_indices(" in imp.source
    xt = x.clone().requires_grad_()
    value, idx = _Pools()(xt)
    value.backward()
    (got, got_idx), (dx,) = adc.value_and_grad(imp.module, imp.fn, has_aux=True)(x.numpy())
    np.testing.assert_allclose(got, value.item(), rtol=1e-12)
    np.testing.assert_array_equal(got_idx, idx.numpy())
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-12, atol=1e-13)
