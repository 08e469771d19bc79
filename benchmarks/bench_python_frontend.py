"""The Python front end: compiling a 100-line NumPy function, and calling it, against the
same program written in TDSL and against ``jax.jit`` of the same function (if JAX is
importable).

    python benchmarks/bench_python_frontend.py [--lines 100] [--repeat 20]

The function is `lines` statements of elementwise ops, matmuls and row reductions on a
[64, 32] array, then a mean; it is written to a temporary .py file (adc compiles a function
from its source) and as TDSL with the same ops in the same order. Figures:

* compile: the Python front end alone (source -> syntax tree -> IR, the part that replaces
  TDSL's parser) against TDSL's ``compile_source``; then the first call of ``adc.jit(f)``
  (front end, pipeline, runner, one run) against ``adc.function`` of the TDSL text and its
  first call; then ``jax.jit``'s lowering and compilation;
* call: the median time of a call after warm-up, for the function and its gradient with
  respect to both inputs (adc from Python, adc from TDSL, JAX).

Times are medians of `repeat` runs, in milliseconds, on the CPU; the values agree (checked).
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PY_STEPS = ["h{k} = np.tanh(h{p} @ w)",
            "h{k} = h{p} * 0.5 + np.sin(h{p})",
            "h{k} = np.maximum(h{p}, 0.0) - 0.1 * h{p}",
            "h{k} = h{p} - np.mean(h{p}, axis=1, keepdims=True)"]
TDSL_STEPS = ["h{k} = tanh(h{p} @ w)",
              "h{k} = h{p} * 0.5 + sin(h{p})",
              "h{k} = maximum(h{p}, 0.0) - 0.1 * h{p}",
              "h{k} = h{p} - mean(h{p}, axis=1, keepdims=true)"]


def sources(lines: int) -> tuple[str, str]:
    body = [PY_STEPS[k % 4].format(k=k + 1, p=k) for k in range(lines - 2)]
    tbody = [TDSL_STEPS[k % 4].format(k=k + 1, p=k) for k in range(lines - 2)]
    last = lines - 2
    py = ("import numpy as np\n\n\ndef f(h0, w):\n" +
          "".join(f"    {s}\n" for s in body) + f"    return np.mean(h{last} * h{last})\n")
    td = ("def f(h0: f64[64, 32], w: f64[32, 32]) -> f64 {\n" +
          "".join(f"    {s}\n" for s in tbody) + f"    return mean(h{last} * h{last})\n}}\n")
    return py, td


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    import adcompiler as adc
    from adcompiler.frontend.python import compile_python, module as pymodule

    py, td = sources(args.lines)
    tmp = Path(tempfile.mkdtemp())
    path = tmp / "bench_fn.py"
    path.write_text(py)
    mod = load(path, "bench_fn")
    rng = np.random.default_rng(0)
    h0, w = rng.standard_normal((64, 32)), rng.standard_normal((32, 32)) / 6

    def front_end():
        pymodule._SOURCES.clear()   # parse the source again each time
        compile_python(mod.f, (h0, w))
    rows = [("front end: Python source -> IR", median_ms(front_end, args.repeat)),
            ("front end: TDSL source -> IR",
             median_ms(lambda: adc.compile_source(td, "f.tdsl"), args.repeat))]

    def first_py():
        pymodule._SOURCES.clear()
        adc.jit(mod.f)(h0, w)
    rows += [("first call: adc.jit(f)(h0, w)", median_ms(first_py, args.repeat)),
             ("first call: adc.function(tdsl)(h0, w)",
              median_ms(lambda: adc.function(td)(h0, w), args.repeat))]

    jf, tf = adc.jit(mod.f), adc.function(td)
    gf, tg = adc.grad(mod.f, argnums=(0, 1)), adc.grad(td, wrt=("h0", "w"))
    value = mod.f(h0, w)
    assert np.allclose(jf(h0, w), value) and np.allclose(tf(h0, w), value)
    for a, b in zip(gf(h0, w), tg(h0, w)):
        assert np.allclose(a, b)
    calls = [("call: adc.jit(f)", median_ms(lambda: jf(h0, w), args.repeat)),
             ("call: adc.function(tdsl)", median_ms(lambda: tf(h0, w), args.repeat)),
             ("call: adc.grad(f)", median_ms(lambda: gf(h0, w), args.repeat)),
             ("call: adc.grad(tdsl)", median_ms(lambda: tg(h0, w), args.repeat))]
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
    except ImportError:
        jax = None
    if jax is not None:
        jmod = load(path, "bench_fn_jax")
        jmod.np = jnp
        def cold_compile():   # JAX keeps compiled and traced functions: start from none
            jax.clear_caches()
            return jax.jit(jmod.f).lower(h0, w).compile()
        rows.append(("jax.jit: lower + compile (caches cleared)",
                     median_ms(cold_compile, max(3, args.repeat // 4))))
        jj = jax.jit(jmod.f)
        jg = jax.jit(jax.grad(jmod.f, argnums=(0, 1)))
        assert np.allclose(jj(h0, w), value)
        jg(h0, w)
        calls += [("call: jax.jit(f)", median_ms(lambda: jj(h0, w).block_until_ready(),
                                                 args.repeat)),
                  ("call: jax.jit(jax.grad(f))",
                   median_ms(lambda: [g.block_until_ready() for g in jg(h0, w)],
                             args.repeat))]
    print(f"# {args.lines}-line function, inputs [64, 32] and [32, 32], float64; "
          f"median of {args.repeat} runs, ms")
    for name, ms in rows + calls:
        print(f"{name:42s} {ms:9.3f}")


if __name__ == "__main__":
    sys.exit(main())
