"""Data-parallel training: the ``allreduce`` pass in one process, and N processes under
mpiexec against one process (skipped where mpi4py or mpiexec is missing)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.diagnostics import AdcError
from adcompiler.training.distributed import shard
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.passes.allreduce import AllReduce
from adc_runtime.collectives import Local

SCRIPT = Path(__file__).parent / "distributed" / "train_mlp.py"
DEEP = "\n".join(
    ["def deep(x: f64[B, 16], y: f64[B], " + ", ".join(f"param W{i}: f64[16, 16]"
                                                      for i in range(6)) + ") -> f64 {",
     "    h = x"] + [f"    h = tanh(h @ W{i})" for i in range(6)] +
    ["    return mean((sum(h, axis=1) - y) ** 2)", "}"])


def _step(bucket_mb=25.0, overlap=True, comm=Local()):
    return adc.train_step(DEEP, adc.optim.sgd(0.1, momentum=0.9), clip=1.0, comm=comm,
                          bucket_mb=bucket_mb, overlap=overlap)


def _body(step):
    return step.module[step.fn_name].body.ops


def test_buckets_follow_the_reverse_sweep_and_start_as_soon_as_complete():
    # 16*16*8 bytes = 2 KiB per gradient; as in DDP a bucket closes once it reaches its
    # cap (4 KiB here), so the first holds the loss and two gradients
    step = _step(bucket_mb=4096 / 2**20)
    ops = _body(step)
    buckets = step.module[step.fn_name].attrs["allreduce_buckets"]
    # the last layer's gradient is final first; the loss is made before every gradient
    assert buckets == (("loss", "grad_W5", "grad_W4"), ("grad_W3", "grad_W2"),
                       ("grad_W1", "grad_W0"))
    where = {r.name: i for i, op in enumerate(ops) for r in op.results if r.name}
    starts = [i for i, op in enumerate(ops) if op.name == "allreduce_start"]
    waits = [i for i, op in enumerate(ops) if op.name == "allreduce_wait"]
    for k, bucket in enumerate(buckets):
        # each start directly follows the op that makes the bucket's last gradient
        assert starts[k] == max(where[v] for v in bucket) + 1
    # backward ops run between the first start and the first wait: overlap
    assert starts[0] < starts[-1] < waits[0]
    # (after dW5 and dW4: four weight gradients and three products through W3..W1)
    assert sum(op.name == "matmul" for op in ops[starts[0]:waits[0]]) == 7
    # nothing reads a raw gradient but its bucket's start
    raw = {r for op in ops for r in op.results if r.name in {f"grad_W{i}" for i in range(6)}}
    for op in ops:
        if op.name != "allreduce_start":
            assert not raw & set(op.operands), op


def test_blocking_schedule_puts_every_allreduce_after_the_backward():
    ops = _body(_step(bucket_mb=4096 / 2**20, overlap=False))
    kinds = [op.name for op in ops if op.name.startswith("allreduce")]
    assert kinds == ["allreduce_start", "allreduce_wait"] * 3
    last_matmul = max(i for i, op in enumerate(ops) if op.name == "matmul")
    assert min(i for i, op in enumerate(ops) if op.name == "allreduce_start") > last_matmul


def test_default_bucket_holds_every_small_gradient():
    step = _step()
    assert len(step.module[step.fn_name].attrs["allreduce_buckets"]) == 1


def test_step_ir_round_trips_and_emits_python(tmp_path):
    step = _step(bucket_mb=4096 / 2**20)
    text = print_module(step.module)
    assert "allreduce_start" in text and "allreduce_wait" in text
    assert print_module(parse_module(text)) == text
    from adcompiler.emit.python import emit_python
    src = emit_python(step.module, step.fn_name)
    assert "K['allreduce_start']" in src and "K['allreduce_wait']" in src
    compile(src, "step.py", "exec")


def test_dce_keeps_collectives_whose_results_are_unused():
    from adcompiler.passes.pipeline import run_pipeline
    step = _step(bucket_mb=4096 / 2**20)
    fn = step.module[step.fn_name]
    before = sum(op.name.startswith("allreduce") for op in fn.body.ops)
    after = run_pipeline(step.module, f"dce{{fn={step.fn_name}}},cse")[step.fn_name]
    assert sum(op.name.startswith("allreduce") for op in after.body.ops) == before == 6


def _train(step, steps=5):
    rng = np.random.default_rng(3)
    params = {f"W{i}": rng.normal(size=(16, 16)) * 0.3 for i in range(6)}
    state = step.init(params)
    x, y = rng.normal(size=(8, 16)), rng.normal(size=8)
    for _ in range(steps):
        params, state, metrics = step(params, state, {"x": x, "y": y})
    return params, metrics


def test_one_process_is_bit_identical_to_the_step_without_allreduce():
    plain = adc.train_step(DEEP, adc.optim.sgd(0.1, momentum=0.9), clip=1.0)
    p0, m0 = _train(plain)
    for kw in ({}, {"bucket_mb": 4096 / 2**20}, {"overlap": False}):
        p1, m1 = _train(_step(**kw))
        for k in p0:
            np.testing.assert_array_equal(p0[k], p1[k])
        np.testing.assert_array_equal(m0["loss"], m1["loss"])
        np.testing.assert_array_equal(m0["grad_norm"], m1["grad_norm"])


def test_memory_prediction_counts_the_buckets():
    from adcompiler.memory.liveness import predict_peak
    step = adc.train_step(DEEP, adc.optim.sgd(0.1), dims={"B": 8}, comm=Local(),
                          bucket_mb=4096 / 2**20)
    fn = step.module[step.fn_name]
    buckets = {op.result for op in fn.body.ops if op.name == "allreduce_start"}
    prof = predict_peak(step.module, fn, {"B": 8}, tracked=buckets)
    # every bucket is in flight from its start to the waits after the backward pass:
    # the loss and six 16x16 f64 gradients
    assert prof.tracked_peak == 8 + 6 * 16 * 16 * 8


def test_bad_options_and_uneven_shards():
    with pytest.raises(AdcError, match="bucket_mb must be positive"):
        _step(bucket_mb=0)
    with pytest.raises(AdcError, match="not a training step"):
        AllReduce(fn="deep")(adc.load(DEEP))
    with pytest.raises(AdcError, match="multiple of 4"):
        shard(np.arange(10), 0, 4)
    np.testing.assert_array_equal(shard(np.arange(12), 2, 3), [8, 9, 10, 11])


def _mpiexec():
    pytest.importorskip("mpi4py")
    found = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or \
        shutil.which("mpiexec")
    if not found:
        pytest.skip("no mpiexec")
    return found


def _launch(n, out, *extra, timeout=180):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run([_mpiexec(), "-n", str(n), sys.executable, str(SCRIPT), str(out),
                           *extra], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("mpi") / "n1.npz"
    r = _launch(1, out)
    assert r.returncode == 0, r.stderr
    return dict(np.load(out))


@pytest.mark.parametrize("n, mode", [(2, ""), (3, ""), (2, "nobucket"), (3, "blocking")])
def test_n_processes_train_as_one(one_process, tmp_path, n, mode):
    out = tmp_path / f"n{n}.npz"
    r = _launch(n, out, *([mode] if mode else []))
    assert r.returncode == 0, r.stderr
    got = dict(np.load(out))
    assert set(got) == set(one_process)
    for k, ref in one_process.items():
        np.testing.assert_allclose(got[k], ref, rtol=1e-12, atol=1e-14, err_msg=k)
    assert one_process["losses"][-1] < one_process["losses"][0]


def test_n_processes_are_deterministic(tmp_path):
    runs = []
    for k in range(2):
        out = tmp_path / f"run{k}.npz"
        r = _launch(2, out)
        assert r.returncode == 0, r.stderr
        runs.append(dict(np.load(out)))
    for k in runs[0]:
        np.testing.assert_array_equal(runs[0][k], runs[1][k])


def test_a_failing_rank_stops_every_rank_with_its_message(tmp_path):
    out = tmp_path / "never.npz"
    r = _launch(3, out, "fail:1:3")
    assert r.returncode != 0, r.stderr
    assert "rank 1 of 3 failed: a failure made on purpose" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.parametrize("who", ["1", "all"])
def test_a_rank_failing_before_any_allreduce_ends_every_rank_without_abort(tmp_path, who):
    # the ranks agree on the lowest failing one, which alone reports; nothing aborts
    out = tmp_path / "never.npz"
    r = _launch(3, out, f"fail:{who}:0")
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("a failure made on purpose") == 1, r.stderr
    assert "failed:" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.parametrize("lead, b_shape, total", [(0, "4", "10"), (1, "2, 4", "2, 7")])
def test_collective_gradients_match_central_differences(lead, b_shape, total):
    from gradcheck import finite_difference, run
    from adcompiler.passes.reverse import Reverse
    m = adc.load(f"def f(a: f64[2, 3], b: f64[{b_shape}], w: f64[{total}]) -> f64 {{\n"
                 f"    s = allreduce_start(tanh(a), b * b, lead={lead})\n"
                 f"    return sum(allreduce_wait(s) * w)\n}}\n")
    rng = np.random.default_rng(1)
    inputs = {"a": rng.standard_normal((2, 3)),
              "b": rng.standard_normal(tuple(int(d) for d in b_shape.split(","))),
              "w": rng.standard_normal(tuple(int(d) for d in total.split(",")))}
    outs = run(Reverse(wrt=("a", "b"), fn="f")(m), "f_grad", inputs)
    for name, got in zip(("a", "b"), outs[1:]):
        np.testing.assert_allclose(got, finite_difference(m, inputs, name), rtol=1e-7,
                                   atol=1e-9)


# ---- adc train --distributed mpi -------------------------------------------------------

CLI_MODEL = """
def mlp(x: f32[B, 5], y: i64[B], param W1: f32[5, 7], param b1: f32[7],
        param W2: f32[7, 3], param b2: f32[3]) -> f32 {
    h = tanh(x @ W1 + b1)
    return mean(cross_entropy(h @ W2 + b2, y))
}
"""


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """`run(n, *options) -> (saved params, stderr)`: adc train under mpiexec -n n (n = 0:
    without mpiexec and without --distributed)."""
    d = tmp_path_factory.mktemp("cli")
    (d / "mlp.tdsl").write_text(CLI_MODEL)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 5))
    np.savez(d / "data.npz", x=x, y=np.argmax(x @ rng.normal(size=(5, 3)), axis=1))
    count = iter(range(1000))

    def run(n, *options):
        out = d / f"p{next(count)}.npz"
        cmd = [sys.executable, "-m", "adcompiler", "train", str(d / "mlp.tdsl"), "--data",
               str(d / "data.npz"), "--batch", "12", "--dtype", "f64", "--optimizer",
               "adam:lr=0.05", "--clip", "1.0", "--save", str(out), *options]
        if n:
            cmd = [_mpiexec(), "-n", str(n)] + cmd + ["--distributed", "mpi"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=d)
        assert r.returncode == 0, r.stderr
        return dict(np.load(out)), r.stdout
    return run


def _close(a, b):
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-14, err_msg=k)


def test_adc_train_on_two_processes_equals_one(cli_run):
    one, _ = cli_run(0, "--steps", "20")
    two, out = cli_run(2, "--steps", "20")
    _close(one, two)
    assert "2 processes" in out


def test_adc_train_resumes_with_another_number_of_processes(cli_run, tmp_path):
    ckpt = tmp_path / "ckpt.npz"
    straight, _ = cli_run(0, "--steps", "16", "--accumulate", "2")
    cli_run(2, "--steps", "8", "--accumulate", "2", "--checkpoint", str(ckpt))
    resumed, _ = cli_run(3, "--steps", "16", "--accumulate", "2", "--resume", str(ckpt))
    _close(straight, resumed)


def test_adc_train_refuses_a_batch_that_does_not_split(tmp_path):
    (tmp_path / "m.tdsl").write_text(CLI_MODEL)
    np.savez(tmp_path / "d.npz", x=np.zeros((10, 5)), y=np.zeros(10, dtype=np.int64))
    r = subprocess.run([_mpiexec(), "-n", "3", sys.executable, "-m", "adcompiler", "train",
                        str(tmp_path / "m.tdsl"), "--data", str(tmp_path / "d.npz"),
                        "--batch", "5", "--distributed", "mpi"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    # every rank finds the mistake before any all-reduce: one message, no MPI_Abort
    assert r.stderr.count("does not split evenly over 3 processes") == 1, r.stderr
    assert "of 3 failed" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_distributed_mpi_without_mpi4py_names_the_extra(monkeypatch):
    from adcompiler.training.distributed import communicator
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(AdcError, match=r"pip install -e '.\[mpi\]'"):
        communicator("mpi")
    assert communicator("none") is None


def test_ring_model_of_the_benchmark():
    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    from bench_distributed import best_bucket, ring_model
    c, g = 0.1, 100 * 2**20
    assert ring_model(c, g, 1, 25 * 2**20) == c
    # one bucket: nothing overlaps, its whole all-reduce is exposed
    one = 2 * 7 / 8 * g / 25e9 + 2 * 7 * 5e-6
    assert ring_model(c, g, 8, 2**40) == pytest.approx(c + one)
    # more processes never make the step faster; smaller buckets hide more at small N
    times = [ring_model(c, g, n, 25 * 2**20) for n in (2, 8, 64, 1024)]
    assert times == sorted(times) and times[0] > c
    assert ring_model(c, g, 8, 25 * 2**20) < ring_model(c, g, 8, 2**40)
    size, t = best_bucket(c, g, 64)
    assert t <= ring_model(c, g, 64, 25 * 2**20) and 2**16 <= size <= 2**30


# ---- the NCCL communicator on a CPU stand-in of cupy.cuda -------------------------------

def fake_cupy_nccl(size: int):
    """``cupy`` with streams, events and ``cuda.nccl`` for NumPy arrays: a communicator of
    `size` threads whose allReduce sums the buffers at the given addresses (at once: the
    stand-in's streams are synchronous) and records which stream each call was queued on."""
    import ctypes
    import threading
    import types
    barrier = threading.Barrier(size)
    deposits: dict[int, np.ndarray] = {}
    log: list = []
    ctype = {0: ctypes.c_float, 1: ctypes.c_double}

    class Stream:
        def __init__(self, non_blocking=False):
            self.ptr, self.waited = id(self), []

        def wait_event(self, event):
            self.waited.append(event)

    class Event:
        def record(self, stream=None):
            self.stream = stream

    current = threading.local()

    def get_current_stream():
        if not hasattr(current, "s"):
            current.s = Stream()
        return current.s

    class Communicator:
        def __init__(self, rank):
            self.rank = rank

        def allReduce(self, send, recv, count, dtype, op, stream):
            assert send == recv and op == "sum"
            a = np.ctypeslib.as_array(ctypes.cast(recv, ctypes.POINTER(ctype[dtype])),
                                      (count,))
            log.append((self.rank, count, stream))
            deposits[self.rank] = a.copy()
            barrier.wait()
            total = sum(deposits[r] for r in range(size))
            barrier.wait()
            a[...] = total

    nccl = types.SimpleNamespace(NCCL_FLOAT16=2, NCCL_FLOAT32=0, NCCL_FLOAT64=1,
                                 NCCL_SUM="sum")
    cuda = types.SimpleNamespace(Stream=Stream, Event=Event, nccl=nccl,
                                 get_current_stream=get_current_stream)
    cp = types.ModuleType("cupy")
    cp.cuda = cuda
    return cp, Communicator, log


def test_nccl_communicator_on_a_stand_in_trains_as_one_process(monkeypatch):
    import threading
    from adc_runtime.collectives import NCCL
    cp, Communicator, log = fake_cupy_nccl(2)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cp.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", cp.cuda.nccl)
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(8, 16)), rng.normal(size=8)
    params0 = {f"W{i}": rng.normal(size=(16, 16)) * 0.3 for i in range(6)}

    def train(step, rows):
        params, state = dict(params0), step.init(params0)
        for _ in range(4):
            params, state, _ = step(params, state, {"x": x[rows], "y": y[rows]})
        return params

    want = train(adc.train_step(DEEP, adc.optim.sgd(0.1, momentum=0.9), clip=1.0),
                 slice(None))
    got, errors = {}, []

    def rank(r):
        try:
            comm = NCCL(Communicator(r), r, 2)
            step = _step(bucket_mb=4096 / 2**20, comm=comm)
            got[r] = train(step, slice(4 * r, 4 * r + 4))
            # every all-reduce ran on the communication stream, after the compute stream
            assert comm.stream.waited and not comm._pending
        except BaseException as e:   # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for r in (0, 1):
        for k in want:
            np.testing.assert_allclose(got[r][k], want[k], rtol=1e-12, atol=1e-14)
    assert {stream for _, _, stream in log} and len(log) == 2 * 4 * 3   # 3 buckets a step


class ThreadComm:
    """`size` threads of one process averaging their buffers: a reference communicator."""

    def __init__(self, shared, rank: int, size: int):
        self.shared, self.rank, self.size = shared, rank, size

    def start(self, buf):
        barrier, deposits = self.shared
        deposits[self.rank] = buf.copy()
        barrier.wait()
        total = sum(deposits[r] for r in range(self.size))
        barrier.wait()
        buf[...] = total

    def wait(self, buf):
        pass


EDGE = """
def f(x: f64[B, 3], param s: f64, param W: f64[1, 3], param E: f64[0, 2]) -> f64 {
    return mean(sum((x * W) ** 2, axis=1) * tanh(s)) + sum(E)
}
"""


@pytest.mark.parametrize("bucket_mb", [25.0, 1e-6])
def test_edge_shapes_average_over_threads_as_one_process(bucket_mb):
    import threading
    rng = np.random.default_rng(2)
    x = rng.normal(size=(6, 3))
    p0 = {"s": np.array(0.3), "W": rng.normal(size=(1, 3)), "E": np.zeros((0, 2))}

    def train(comm, rows):
        step = adc.train_step(EDGE, adc.optim.adam(0.1), comm=comm, bucket_mb=bucket_mb)
        params, state = dict(p0), step.init(p0)
        for _ in range(3):
            params, state, metrics = step(params, state, {"x": x[rows]})
        return params, metrics

    want, wm = train(None, slice(None))
    shared, got = (threading.Barrier(3), {}), {}
    threads = [threading.Thread(target=lambda r=r: got.__setitem__(
        r, train(ThreadComm(shared, r, 3), slice(2 * r, 2 * r + 2)))) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for r in range(3):
        params, metrics = got[r]
        for k in want:
            assert params[k].shape == want[k].shape
            np.testing.assert_allclose(params[k], want[k], rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(metrics["loss"], wm["loss"], rtol=1e-12)


@pytest.mark.parametrize("first, second, fragment", [
    (["--data", "d48.npz"], ["--data", "d24.npz"],
     "disagree on the rows of their training data (24 on one, 48 on another)"),
    (["--steps", "4"], ["--steps", "5"], "disagree on the number of steps (4 on one, 5 on"),
    (["--bucket-mb", "25"], ["--bucket-mb", "0.0001"],
     "disagree on --bucket-mb (0.0001 on one, 25 on another)"),
])
def test_ranks_that_disagree_on_the_plan_stop_together(first, second, fragment, tmp_path):
    """Ranks given other data rows or options would wait forever in different
    all-reduces: they compare their plans before the first step and all stop, one
    message, no MPI_Abort."""
    (tmp_path / "m.tdsl").write_text(CLI_MODEL)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 5)).astype(np.float32)
    y = np.argmax(x @ rng.normal(size=(5, 3)), axis=1)
    np.savez(tmp_path / "d48.npz", x=x, y=y)
    np.savez(tmp_path / "d24.npz", x=x[:24], y=y[:24])
    base = [sys.executable, "-m", "adcompiler", "train", "m.tdsl", "--batch", "12",
            "--distributed", "mpi"]
    defaults = {"--data": "d48.npz", "--steps": "4"}

    def rank(opts):
        given = dict(zip(opts[::2], opts[1::2]))
        return base + [a for k, v in {**defaults, **given}.items() for a in (k, v)]
    mpiexec = _mpiexec()
    r = subprocess.run([mpiexec, "-n", "1", *rank(first), ":", "-n", "1", *rank(second)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert r.stderr.count(fragment) == 1, r.stderr
    assert "of 2 failed" not in r.stderr and "Traceback" not in r.stderr, r.stderr
