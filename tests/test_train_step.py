"""The ``train-step`` pass and `adc.train_step`: the step is ordinary IR (prints, parses
back, emits as Python), accumulation equals the big-batch step, updates are in place, and
bad options are named errors. (Parity with torch.optim: test_train_step_torch.py.)"""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.passes.train_step import gradient_values
from adc_runtime.errors import RunError

MLP = "samples/mlp.tdsl"


def mlp_data(rows=32, seed=0):
    rng = np.random.default_rng(seed)
    params = {"W1": rng.normal(size=(4, 8)), "b1": rng.normal(size=8) * 0.1,
              "W2": rng.normal(size=(8, 3)), "b2": np.zeros(3)}
    batch = {"x": rng.normal(size=(rows, 4)), "labels": rng.integers(0, 3, rows)}
    return params, batch


def run_steps(step, params, batch, n=3):
    state = step.init(params)
    p = params
    for _ in range(n):
        p, state, m = step(p, state, batch)
    return p, state, m


def test_step_function_signature_and_names():
    step = adc.train_step(MLP, adc.optim.adam(), clip=1.0)
    fn = step.module[step.fn_name]
    assert step.fn_name == "mlp_step"
    assert fn.arg_names == ["W1", "b1", "W2", "b2", "step", "exp_avg_W1", "exp_avg_b1",
                            "exp_avg_W2", "exp_avg_b2", "exp_avg_sq_W1", "exp_avg_sq_b1",
                            "exp_avg_sq_W2", "exp_avg_sq_b2", "x", "labels"]
    assert list(fn.attrs["outputs"]) == ["loss", "W1", "b1", "W2", "b2"] + \
        fn.arg_names[4:13] + ["grad_norm", "grad_norm_W1", "grad_norm_b1", "grad_norm_W2",
                              "grad_norm_b2", "lr"]
    grads = gradient_values(fn)
    assert list(grads) == ["W1", "b1", "W2", "b2"]
    assert all(grads[p].type == fn.arg(p).type for p in grads)
    # the gradients feed the norms (and clipping) before the update reads them
    assert fn.returned[fn.attrs["outputs"].index("grad_norm_W1")].defining_op.name == "sqrt"


def test_step_ir_round_trips_and_runs_the_same():
    step = adc.train_step(MLP, adc.optim.sgd(0.1, momentum=0.9), clip=0.5, dtype="f64")
    text = adc.print_module(step.module)
    parsed = adc.parse_ir(text)
    assert adc.print_module(parsed) == text
    assert gradient_values(parsed[step.fn_name]).keys() == {"W1", "b1", "W2", "b2"}
    params, batch = mlp_data()
    state = step.init(params)
    inputs = {**params, **state, **batch}
    want = adc.run(step.module, step.fn_name, inputs)
    got = adc.run(parsed, step.fn_name, inputs)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    ns: dict = {}
    exec(compile(adc.emit_python(parsed, step.fn_name), "step.py", "exec"), ns)
    emitted = ns[step.fn_name](*[np.asarray(inputs[n]) for n in parsed[step.fn_name].arg_names])
    for a, b in zip(emitted, want):
        np.testing.assert_allclose(a, b, rtol=1e-13)


def test_pipeline_text_builds_the_same_step():
    m = adc.run_pipeline(adc.load(MLP), "inline,canonicalize,cse,dce,"
                         "train-step{optimizer=adam lr=0.01 clip=1.0}")
    step = adc.train_step(MLP, adc.optim.adam(0.01), clip=1.0)
    assert adc.print_function(m["mlp_step"]) == adc.print_function(step.module["mlp_step"])


def test_python_loop_reference_for_sgd():
    """Two SGD steps against value_and_grad and the update written out by hand."""
    params, batch = mlp_data(seed=4)
    vg = adc.value_and_grad(MLP, wrt=("W1", "b1", "W2", "b2"))
    step = adc.train_step(MLP, adc.optim.sgd(0.05, weight_decay=0.1))
    p_ref = {k: v.astype(np.float32) for k, v in params.items()}
    p, state = params, step.init(params)
    for _ in range(2):
        loss, grads = vg(**batch, **p_ref)
        p_ref = {k: v - np.float32(0.05) * (g + np.float32(0.1) * v)
                 for (k, v), g in zip(p_ref.items(), grads)}
        p, state, m = step(p, state, batch)
        np.testing.assert_allclose(m["loss"], loss, rtol=1e-6)
    for k in p:
        np.testing.assert_allclose(p[k], p_ref[k], rtol=1e-5, atol=1e-6)
    assert int(state["step"]) == 2


@pytest.mark.parametrize("opt", [adc.optim.adam(1e-2), adc.optim.sgd(0.1, momentum=0.9,
                                                                      dampening=0.5)])
def test_accumulation_equals_the_big_batch_step(opt):
    params, batch = mlp_data(rows=32, seed=1)
    big = adc.train_step(MLP, opt, clip=0.5, dtype="f64")
    acc = adc.train_step(MLP, opt, clip=0.5, dtype="f64", accumulate=4)
    loop = next(op for op in acc.module[acc.fn_name].body.ops if op.name == "for")
    assert loop.attrs["n"] == 4
    p1, s1, m1 = run_steps(big, params, batch)
    p2, s2, m2 = run_steps(acc, params, batch)
    for k in m1:
        np.testing.assert_allclose(m2[k], m1[k], rtol=1e-12)
    for k in p1:
        np.testing.assert_allclose(p2[k], p1[k], rtol=1e-12, atol=1e-15)
        assert not np.array_equal(p2[k], params[k])
    with pytest.raises(adc.AdcError, match="multiple of 4 rows"):
        acc(p2, s2, {"x": batch["x"][:30], "labels": batch["labels"][:30]})


def test_updates_in_place_and_never_writes_callers_arrays():
    params, batch = mlp_data()
    step = adc.train_step(MLP, adc.optim.adam(1e-2))
    original = {k: v.copy() for k, v in params.items()}
    state = step.init(params)
    p1, s1, _ = step(params, state, batch)
    for k in params:
        np.testing.assert_array_equal(params[k], original[k])  # the caller's arrays
    ids = {k: id(v) for k, v in {**p1, **s1}.items()}
    before = {k: v.copy() for k, v in p1.items()}
    p2, s2, _ = step(p1, s1, batch)
    assert {k: id(v) for k, v in {**p2, **s2}.items()} == ids  # same arrays, written over
    assert all(not np.array_equal(p2[k], before[k]) for k in p2)
    assert int(s2["step"]) == 2


def test_in_place_plan_covers_every_parameter_and_slot():
    from adc_runtime.buffers import donations
    from adc_runtime.executor import Executor
    for opt in (adc.optim.sgd(0.1, momentum=0.9, nesterov=True), adc.optim.adamw()):
        step = adc.train_step(MLP, opt, clip=1.0)
        fn = step.module[step.fn_name]
        ex = Executor(step.module)
        pairs = donations(fn, ex.in_place_results, ex.writes_elementwise)
        names = {fn.args[j].name for _, j in pairs}
        assert names == set(fn.attrs["params"]) | set(fn.attrs["state"])


def test_optimizer_text_and_bad_options():
    assert adc.optim.parse_optimizer("adam:lr=1e-3,wd=0.01,b2=0.99") == \
        adc.optim.adam(1e-3, betas=(0.9, 0.99), weight_decay=0.01)
    assert adc.optim.parse_optimizer("sgd:lr=0.1,momentum=0.9,nesterov=true").nesterov
    for text, msg in (("rmsprop:lr=1", "unknown optimizer 'rmsprop'"),
                      ("adam:lr=fast", "lr must be a number, got 'fast'"),
                      ("adam:momentum=0.9", "has no option 'momentum=0.9'"),
                      ("sgd:momentum=0.9", "needs a learning rate"),
                      ("sgd:lr=0.1,nesterov=true", "Nesterov momentum needs momentum > 0")):
        with pytest.raises(adc.AdcError, match=msg):
            adc.optim.parse_optimizer(text)
    with pytest.raises(adc.AdcError, match="betas"):
        adc.optim.adam(betas=(0.9, 1.0))
    with pytest.raises(adc.AdcError, match="one float scalar"):
        adc.train_step("def f(param w: f32[3]) -> f32[3] {\n    return w * w\n}\n",
                       adc.optim.sgd(0.1))
    with pytest.raises(adc.AdcError, match="clip must be a positive"):
        adc.train_step(MLP, adc.optim.sgd(0.1), clip=0.0)


def test_wrong_names_are_type_errors():
    params, batch = mlp_data()
    step = adc.train_step(MLP, adc.optim.sgd(0.1))
    state = step.init(params)
    with pytest.raises(TypeError, match="missing 'b2'"):
        step({k: v for k, v in params.items() if k != "b2"}, state, batch)
    with pytest.raises(TypeError, match="unknown 'y'"):
        step(params, state, {**batch, "y": 1})


def test_remat_schedule_gives_the_same_step_bits():
    rng = np.random.default_rng(3)
    params = {"W": rng.normal(size=(64, 8, 8)) * 0.3, "b": rng.normal(size=(64, 8)) * 0.1}
    batch = {"x": rng.normal(size=(32, 8))}
    plain = adc.train_step("samples/deep_mlp.tdsl", adc.optim.adam(1e-2), clip=1.0)
    remat = adc.train_step("samples/deep_mlp.tdsl", adc.optim.adam(1e-2), clip=1.0,
                           remat="sqrt")
    assert adc.print_module(plain.module) != adc.print_module(remat.module)
    p1, s1, m1 = run_steps(plain, params, batch, n=2)
    p2, s2, m2 = run_steps(remat, params, batch, n=2)
    for d1, d2 in ((p1, p2), (s1, s2), (m1, m2)):
        for k in d1:
            np.testing.assert_array_equal(d1[k], d2[k])


def rnn_data(T, seed=4):
    rng = np.random.default_rng(seed)
    params = {"Wx": rng.normal(size=(3, 4)) * 0.3, "Wh": rng.normal(size=(4, 4)) * 0.3,
              "b": rng.normal(size=4) * 0.1, "wo": rng.normal(size=4)}
    batch = {"xs": rng.normal(size=(T, 3)), "ys": rng.normal(size=T)}
    return params, batch


@pytest.mark.parametrize("policy", ["revolve:2", "sqrt"])
def test_remat_of_a_loop_in_a_step_binds_its_trip_count(policy):
    # the loop's count is symbolic in the program: the step is specialized to dims' T, so
    # the loop really is checkpointed (400 steps under revolve:2 are emitted as shared
    # parts that borrow their arguments, beside the step's in-place parameters)
    params, batch = rnn_data(400)
    plain = adc.train_step("samples/rnn.tdsl", adc.optim.adam(1e-2), dtype="f64")
    remat = adc.train_step("samples/rnn.tdsl", adc.optim.adam(1e-2), dtype="f64",
                           remat=policy, dims={"T": 400})
    grad = adc.print_module(remat.module).split("func @rnn_step")[0]
    assert "h_stack" not in grad
    if policy == "revolve:2":
        assert any(f.attrs.get("borrows_args") for f in remat.module.functions.values())
    p1, s1, m1 = run_steps(plain, params, batch, n=2)
    p2, s2, m2 = run_steps(remat, params, batch, n=2)
    for d1, d2 in ((p1, p2), (s1, s2), (m1, m2)):
        for k in d1:
            np.testing.assert_array_equal(d1[k], d2[k])
    with pytest.raises(RunError, match=r"declared f64\[400, 3\]"):   # another T is refused
        remat(p2, s2, rnn_data(300)[1])


def test_remat_of_a_loop_with_an_unbound_trip_count_is_refused():
    with pytest.raises(adc.AdcError, match=r"bind T .*dims=\{'T': N\}") as e:
        adc.train_step("samples/rnn.tdsl", adc.optim.adam(1e-2), remat="revolve:2")
    assert e.value.loc.line == 9


def test_accumulating_step_round_trips_and_emits():
    step = adc.train_step(MLP, adc.optim.adamw(1e-2), accumulate=2, dtype="f64")
    text = adc.print_module(step.module)
    parsed = adc.parse_ir(text)
    assert adc.print_module(parsed) == text
    fn = parsed[step.fn_name]
    assert [str(fn.arg(n).type) for n in ("x", "labels")] == ["f64[2, B, 4]", "i64[2, B]"]
    params, batch = mlp_data(rows=16, seed=7)
    state = step.init(params)
    split = {k: v.reshape((2, 8) + v.shape[1:]) for k, v in batch.items()}
    inputs = {**params, **state, **split}
    want = adc.run(step.module, step.fn_name, inputs)
    ns: dict = {}
    exec(compile(adc.emit_python(parsed, step.fn_name), "step.py", "exec"), ns)
    got = ns[step.fn_name](*[np.asarray(inputs[n]) for n in fn.arg_names])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-13)
    _, _, metrics = step(params, state, batch)
    np.testing.assert_allclose(metrics["loss"], want[0], rtol=1e-15)


def test_empty_parameter_and_batch_of_one():
    src = ("def f(x: f64[B, 2], param w: f64[2], param e: f64[0]) -> f64 {\n"
           "    return mean((x @ w) * (x @ w)) + sum(e * e)\n}\n")
    step = adc.train_step(src, adc.optim.adam(0.1), clip=1.0)
    params = {"w": np.array([1.0, -2.0]), "e": np.zeros(0)}
    p, state, m = run_steps(step, params, {"x": np.array([[0.5, 0.5]])}, n=2)
    assert p["e"].shape == (0,) and state["exp_avg_e"].shape == (0,)
    assert float(m["grad_norm_e"]) == 0.0
    # Adam's first step moves each weight by lr against the sign of its gradient
    assert np.all(np.abs(p["w"] - params["w"]) > 0.1)


def test_fused_step_runs_on_the_cupy_stand_in_like_numpy():
    """The step fuses like any program; its fused kernels (run by the CuPy stand-in of
    test_cuda_runtime.py) give NumPy's bits, step after step, with in-place updates on."""
    from test_cuda_runtime import fake_cupy
    from adcompiler.emit.cuda import ensure_fused, kernel_specs
    from adc_runtime import cuda as backend
    from adc_runtime.buffers import donations
    step = adc.train_step(MLP, adc.optim.adam(1e-2), clip=0.5)
    fused = ensure_fused(step.module)
    fn = fused[step.fn_name]
    assert sum(op.name == "fused" for op in fn.body.ops) >= 4
    specs = kernel_specs(fused)
    backend._KERNELS.clear()
    device = backend.runner(fused, step.fn_name, specs,
                            fake_cupy({s.name: op for op, s in specs.items()}, []))
    device.donate = True
    ex = backend.CudaExecutor(fused, None, {}, specs)
    pairs = donations(fn, ex.in_place_results, ex.writes_elementwise)
    assert {fn.args[j].name for _, j in pairs} == set(fn.attrs["params"]) | \
        set(fn.attrs["state"])
    assert any(r.defining_op.name == "fused" for r, _ in pairs)
    params, batch = mlp_data(seed=9)
    p, state = params, step.init(params)
    mine = {k: np.array(v, dtype=np.float32 if k != "step" else np.int64)
            for k, v in {**params, **state}.items()}
    names = fn.attrs["outputs"]
    for _ in range(3):
        p, state, metrics = step(p, state, batch)
        outs, _ = device({**mine, **batch})
        got = dict(zip(names, outs))
        mine = {k: got[k] for k in mine}
        for k, v in {**p, **state, **metrics}.items():
            np.testing.assert_array_equal(got[k], v)
