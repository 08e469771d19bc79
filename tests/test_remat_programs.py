"""Loop programs for the remat tests, built with the Builder (no frontend needed)."""
import numpy as np

from adcompiler.diagnostics import Loc
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.types import TensorType
from adcompiler.passes.pipeline import run_pipeline

I64 = TensorType("i64")


def t(*shape):
    return TensorType("f64", shape)


def residual_mlp(n=64, batch=16, width=8, scan=True):
    """h <- h + tanh(h @ W[i] + b[i]) over n layers; loss sum(h*h). Weights scanned as xs
    (`scan`) or captured and indexed with the loop index."""
    body = Block([t(batch, width), t(n, width, width), t(n, width)], ["x", "W", "b"])
    x, W, bb = body.args
    b = Builder(body, Loc("mlp.tdsl", 1, 1))
    if scan:
        lb = Block([I64, t(batch, width), t(width, width), t(width)], ["i", "h", "w", "c"])
        _, h, w, c = lb.args
    else:
        lb = Block([I64, t(batch, width)], ["i", "h"])
        i, h = lb.args
    with b.inside(lb):
        if not scan:
            w = b.emit("index", W, i, idx=("?",))
            c = b.emit("index", bb, i, idx=("?",))
        with b.at(Loc("mlp.tdsl", 3, 9)):
            z = b.emit("add", b.emit("matmul", h, w), c)
            hn = b.emit("add", h, b.emit("tanh", z))
        b.yield_([hn])
    loop = b.for_(n, lb, [x], [W, bb] if scan else [])
    s = b.emit("sum", b.emit("mul", loop.results[0], loop.results[0]))
    b.ret([s])
    return Module({"f": Function("f", body, [s.type], params={"W", "b"})})


def mlp_inputs(n=64, batch=16, width=8, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, width)),
            "W": 0.3 * rng.standard_normal((n, width, width)),
            "b": 0.1 * rng.standard_normal((n, width))}


def scan_with_outputs(n=11):
    """A carry, a scanned input and per-step outputs used after the loop (concat paths)."""
    body = Block([t(n, 3), t(3)], ["xs", "c0"])
    b = Builder(body)
    lb = Block([I64, t(3), t(3)], ["i", "c", "x"])
    _, c, x = lb.args
    with b.inside(lb):
        cn = b.emit("sin", b.emit("mul", c, b.emit("exp", x)))
        y = b.emit("mul", cn, x)
        b.yield_([cn, y])
    loop = b.for_(n, lb, [body.args[1]], [body.args[0]])
    s = b.emit("add", b.emit("sum", loop.results[0]),
               b.emit("sum", b.emit("tanh", loop.results[1])))
    b.ret([s])
    return Module({"f": Function("f", body, [s.type], params={"xs", "c0"})})


def nested(n_outer=9, n_inner=3):
    body = Block([t(2), t(2)], ["h0", "w"])
    b = Builder(body)
    h0, w = body.args
    outer = Block([I64, t(2)], ["i", "h"])
    with b.inside(outer):
        inner = Block([I64, t(2)], ["j", "g"])
        with b.inside(inner):
            b.yield_([b.emit("sin", b.emit("mul", inner.args[1], w))])
        il = b.for_(n_inner, inner, [outer.args[1]])
        b.yield_([b.emit("add", il.results[0], b.emit("tanh", outer.args[1]))])
    loop = b.for_(n_outer, outer, [h0])
    s = b.emit("sum", loop.results[0])
    b.ret([s])
    return Module({"f": Function("f", body, [s.type], params={"h0", "w"})})


def adjoint(module, wrt):
    return run_pipeline(module, f"reverse{{wrt={','.join(wrt)} fn=f}},dce", verify=True)
