"""adc.from_torch of modules in train mode and their parameters by module path: batch norm
updating its running statistics (state inputs), dropout, groups mirroring the module tree,
and a state_dict loaded and gradients returned under the module's own names."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import adcompiler as adc  # noqa: E402
from torch_models import MLP, TrainCNN  # noqa: E402

F = torch.nn.functional


def _rel(a, b):
    return np.max(np.abs(np.asarray(a) - b)) / max(np.max(np.abs(b)), 1e-300)


def _train_cnn(seed=0, p=0.0):
    torch.manual_seed(seed)
    return TrainCNN(p).double().train()


def test_parameters_are_grouped_by_module_path():
    m = MLP().double()
    x = torch.randn(3, 6, dtype=torch.float64)
    imp = adc.from_torch(m, (x,))
    assert "group Layers {\n    _0: Layers_0\n    _2: Layers_2\n    _4: Layers_4\n}" in \
        imp.source
    assert "param layers: Layers," in imp.source
    assert "x @ layers_0 + layers._0.bias" in imp.source
    assert imp.paths == {k: k.replace("layers.", "layers._") for k in m.state_dict()}
    assert set(imp.params) == set(imp.paths.values())
    # the library's nested dicts: {"layers": {"_0": {"weight": ..., "bias": ...}, ...}}
    tree = {"layers": {f"_{i}": {"weight": m.layers[i].weight.detach().numpy(),
                                 "bias": m.layers[i].bias.detach().numpy()}
                       for i in (0, 2, 4)}}
    out = adc.function(imp.module, imp.fn)(params=tree, x=x.numpy())
    assert _rel(out, m(x).detach().numpy()) < 1e-12


def test_a_state_dict_loads_by_path_and_gradients_come_back_by_path():
    x = torch.randn(2, 3, 10, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    imp = adc.from_torch(_train_cnn(0), (x,), loss="cross_entropy")
    again = adc.compile_source(imp.source, "TrainCNN.tdsl")   # printing and parsing: stable
    assert adc.print_module(again) == adc.print_module(imp.module)
    other = _train_cnn(5)
    with torch.no_grad():
        for mod in other.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
    params, state = imp.load_state_dict(other.state_dict())
    assert set(params) == set(imp.params) and set(state) == set(imp.state)
    out = adc.run(imp.module, imp.fn, {**params, **state, "x": x.numpy()})[0]
    assert _rel(out, other.eval()(x).detach().numpy()) < 1e-12   # evaluation: running stats
    other.train()
    target = torch.tensor([1, 3])
    (loss, new_state), grads = adc.value_and_grad(
        imp.module, "loss", wrt=imp.trained, has_aux=True)(
        **params, **state, x=x.numpy(), target=target.numpy())
    ref = F.cross_entropy(other(x), target)
    ref.backward()
    assert abs(float(loss) - ref.item()) <= 1e-12 * ref.item()
    updated = imp.to_state_dict(dict(zip(imp.state, new_state)))   # one train-mode step
    for k, b in other.named_buffers():
        assert _rel(updated[k], b.numpy()) < 1e-12, k
    by_name = imp.to_state_dict(dict(zip(imp.trained, grads)))
    assert set(by_name) == {k for k, _ in other.named_parameters()}
    for k, p in other.named_parameters():
        assert _rel(by_name[k], p.grad.numpy()) < 1e-10, k
    with pytest.raises(adc.AdcError, match="missing 'fc.bias'"):
        imp.load_state_dict({k: v for k, v in other.state_dict().items() if k != "fc.bias"})


def test_train_mode_batch_norm_follows_pytorch_for_fifty_adam_steps():
    """The issue's check: 50 steps of Adam in float64 follow PyTorch's losses to 1e-9 and
    the running statistics after them equal PyTorch's; then evaluation matches
    model.eval()."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3, 10, 10, dtype=torch.float64, generator=g)
    target = torch.randint(0, 5, (4,), generator=g)
    m = _train_cnn(0)
    imp = adc.from_torch(m, (x,), loss="cross_entropy")
    assert "state features_1_running_mean: f64[6]," in imp.source
    # the update is written under the state's own name, where the batch norm computes it
    assert "    features_1, features_1_running_mean, features_1_running_var = " \
        "batchnorm_running(features_0, features._1.weight, features._1.bias, " \
        "features_1_running_mean, features_1_running_var, eps=1e-05, momentum=0.1)" in \
        imp.source
    assert "    features_1_num_batches_tracked = features_1_num_batches_tracked + 1" in \
        imp.source
    step = adc.train_step(imp.module, adc.optim.adam(1e-2), fn="loss", wrt=imp.trained)
    params = {k: imp.params[k].copy() for k in imp.trained}
    state = step.init(params, model_state=imp.state)
    batch = {"x": x.numpy(), "target": target.numpy()}
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for _ in range(50):
        params, state, metrics = step(params, state, batch)
        opt.zero_grad()
        ref = F.cross_entropy(m(x), target)
        ref.backward()
        opt.step()
        assert abs(float(metrics["loss"]) - ref.item()) <= 1e-9 * max(ref.item(), 1e-3)
    buffers = imp.to_state_dict({k: state[k] for k in imp.state})
    assert set(buffers) == {k for k, _ in m.named_buffers()}
    for k, b in m.named_buffers():
        if k.endswith("num_batches_tracked"):
            assert int(buffers[k]) == int(b) == 50
        else:
            assert _rel(buffers[k], b.numpy()) < 1e-12, k
    m.eval()
    out = adc.run(imp.module, imp.fn, {**params, **{k: state[k] for k in imp.state},
                                       "x": x.numpy()})[0]
    assert _rel(out, m(x).detach().numpy()) < 1e-10


class _Norm1d(torch.nn.Module):
    """BatchNorm1d without gain and bias, its own momentum and eps, on [N, C]."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(5, 4, bias=False)   # a bias before the norm: no gradient
        self.bn = torch.nn.BatchNorm1d(4, affine=False, momentum=0.3, eps=1e-3)
        self.register_buffer("w", torch.randn(6, 4))

    def forward(self, x):
        return (self.bn(self.lin(x)) * self.w).sum()


def test_train_mode_batch_norm_without_affine_parameters():
    torch.manual_seed(0)
    m = _Norm1d().double().train()
    x = torch.randn(6, 5, dtype=torch.float64)
    imp = adc.from_torch(m, (x,))
    assert "bn, bn_running_mean, bn_running_var = batchnorm_running(lin_3, " \
        "stop_gradient(bn_ones), stop_gradient(bn_zeros), bn_running_mean, bn_running_var, " \
        "eps=0.001, momentum=0.3)" in imp.source
    (value, state), grads = adc.value_and_grad(imp.module, imp.fn, wrt=imp.trained,
                                               has_aux=True)(
        x=x.numpy(), **imp.params, **imp.state)
    ref = m(x)
    ref.backward()
    assert abs(float(value) - ref.item()) <= 1e-12 * abs(ref.item())
    got = imp.to_state_dict({**dict(zip(imp.trained, grads)), **dict(zip(imp.state, state))})
    for k, p in m.named_parameters():
        assert _rel(got[k], p.grad.numpy()) < 1e-10, k
    for k in ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked"):
        assert _rel(got[k], m.state_dict()[k].numpy()) < 1e-13, k
    # the constants the import made (the norm's ones and zeros) are no module's: kept
    params, state = imp.load_state_dict(m.state_dict())
    np.testing.assert_array_equal(params["bn_ones"], np.ones(4))
    assert int(state["bn_num_batches_tracked"]) == 1


class _Drop(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.lin, self.drop = torch.nn.Linear(40, 50), torch.nn.Dropout(p)

    def forward(self, x):
        y = self.drop(self.lin(x))
        return (y ** 2).sum(), y


def test_train_mode_dropout_masks_scale_and_backpropagate_as_pytorch():
    """adc's random stream is not torch's, so the masks differ: what is checked is p = 0
    (exactly the identity), the rate and scale of the mask, evaluation (the identity, as
    model.eval()), and a gradient equal to PyTorch's under the mask adc's forward drew."""
    x = torch.randn(30, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for p in (0.0, 0.3):
        torch.manual_seed(0)
        m = _Drop(p).double().train()
        imp = adc.from_torch(m, (x,))
        # torch exports dropout with p = 0 as a copy
        assert ("dropout(lin_3, 0.3)" in imp.source) == (p > 0)
        inputs = {**imp.params, "x": x.numpy()}
        plain = m.lin(x).detach().numpy()
        _, y_eval = adc.function(imp.module, imp.fn)(**inputs)
        np.testing.assert_allclose(y_eval, plain, rtol=1e-12)    # evaluation: identity
        _, y = adc.function(imp.module, imp.fn, training=True, seed=3)(**inputs)
        kept = y != 0
        np.testing.assert_allclose(y[kept], y_eval[kept] / (1 - p), rtol=1e-15)
        rate = 1 - kept.mean()
        assert abs(rate - p) < 4.5 * np.sqrt(p * (1 - p) / y.size) + 1e-12, rate
        (value, y2), grads = adc.value_and_grad(imp.module, imp.fn, wrt=imp.trained,
                                                has_aux=True, seed=3)(**inputs)
        mask = torch.from_numpy((y2 != 0).astype(np.float64))
        ref = ((m.lin(x) * mask / (1 - p)) ** 2).sum()
        ref.backward()
        assert abs(float(value) - ref.item()) <= 1e-12 * ref.item()
        got = imp.to_state_dict(dict(zip(imp.trained, grads)))
        for k, q in m.named_parameters():
            assert _rel(got[k], q.grad.numpy()) < 1e-12, k
