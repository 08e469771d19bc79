"""`adc train` against a PyTorch training loop: same initial weights, same data order (one
`numpy.random.default_rng(seed).permutation` per epoch, cut into batches), same optimizer
and clipping, in float64: the loss of every one of 100 steps agrees to 1e-9 relative."""
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc
from adcompiler import cli

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
DIGITS = str(ROOT / "samples" / "digits_mlp.tdsl")
ROWS, BATCH, STEPS, SEED = 200, 32, 100, 7


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Small float64 matrices: PyTorch's thread pool only slows them down on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _data():
    rng = np.random.default_rng(11)
    x = rng.random((ROWS, 64))
    labels = rng.integers(0, 10, ROWS)
    init = {"W1": rng.standard_normal((64, 64)) * 0.1, "b1": rng.standard_normal(64) * 0.1,
            "W2": rng.standard_normal((64, 10)) * 0.1, "b2": np.zeros(10)}
    return x, labels, init


def _torch_losses(x, labels, init, make_opt, clip):
    params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
              for k, v in init.items()}
    opt = make_opt(list(params.values()))
    rng = np.random.default_rng(SEED)
    order, losses = [], []
    while len(order) < STEPS:
        perm = rng.permutation(ROWS)
        order += [perm[k * BATCH:(k + 1) * BATCH] for k in range(ROWS // BATCH)]
    xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(labels)
    for idx in order[:STEPS]:
        idx = torch.tensor(idx)
        h = torch.relu(xt[idx] @ params["W1"] + params["b1"])
        loss = torch.nn.functional.cross_entropy(h @ params["W2"] + params["b2"], yt[idx])
        opt.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
        opt.step()
        losses.append(loss.item())
    return np.array(losses)


@pytest.mark.parametrize("name, ours, theirs, clip", [
    ("adam", adc.optim.adam(1e-3), lambda p: torch.optim.Adam(p, lr=1e-3), None),
    ("adamw+clip", adc.optim.adamw(3e-3, weight_decay=0.05),
     lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.05), 0.5),
    ("sgd nesterov", adc.optim.sgd(0.05, momentum=0.9, nesterov=True),
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True), None),
])
def test_loss_per_step_matches_pytorch(name, ours, theirs, clip):
    x, labels, init = _data()
    nested = {"m": {"l1": {"W": init["W1"], "b": init["b1"]},    # the group `m: MLP`
                    "l2": {"W": init["W2"], "b": init["b2"]}}}
    result = adc.train(DIGITS, {"x": x, "labels": labels}, ours, params=nested, batch=BATCH,
                       steps=STEPS, clip=clip, seed=SEED, dtype="f64")
    got = np.array([r["loss"] for r in result.history])
    want = _torch_losses(x, labels, init, theirs, clip)
    assert len(got) == STEPS
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
    assert want[-1] < want[0]
    assert sorted(result.params["m"]) == ["l1", "l2"]   # given nested, returned nested
    assert result.params["m"]["l2"]["b"].shape == (10,)


def test_the_command_matches_pytorch(tmp_path, capsys):
    x, labels, init = _data()
    np.savez(tmp_path / "d.npz", x=x, labels=labels)
    paths = {"W1": "m.l1.W", "b1": "m.l1.b", "W2": "m.l2.W", "b2": "m.l2.b"}
    np.savez(tmp_path / "i.npz", **{paths[k]: v for k, v in init.items()})
    code = cli.main(["train", DIGITS, "--fn", "digits_mlp", "--data", str(tmp_path / "d.npz"), "--init",
                     str(tmp_path / "i.npz"), "--dtype", "f64", "--batch", str(BATCH),
                     "--steps", str(STEPS), "--seed", str(SEED), "--optimizer",
                     "adam:lr=1e-3", "--log", str(tmp_path / "m.jsonl")])
    assert code == 0, capsys.readouterr().err
    import json
    got = [json.loads(l)["loss"] for l in (tmp_path / "m.jsonl").read_text().splitlines()]
    want = _torch_losses(x, labels, init, lambda p: torch.optim.Adam(p, lr=1e-3), None)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
