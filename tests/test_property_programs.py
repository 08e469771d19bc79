"""A hypothesis strategy of random well-typed TDSL programs, and a test that they compile.

`programs()` draws ``(source, input shapes)``: a function ``f`` over 1-3 float64 inputs
(small shapes, some broadcasting against each other) and an integer input ``ids``
(``[0, -1, 0]`` at run time, valid for `take` on any table), built as a random DAG of
statements drawn from templates that cover the registry: unary and binary elementwise ops
(domain-restricted ones wrapped to stay in their domain), comparisons and `where`,
reductions over random axes, matmul/einsum/transpose, shape ops and indexing, the
neural-net ops, calls to generated helper functions and ``for`` loops with carries,
captured values and scanned inputs. Every expression's shape is tracked, so the program
is well typed by construction; `f` returns its last value and the sum of a few others.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from adcompiler.frontend import compile_source

UNARY = ["tanh({a})", "sin({a})", "cos({a})", "sigmoid({a})", "softplus({a})", "gelu({a})",
         "square({a})", "relu({a})", "abs({a})", "leaky_relu({a}, slope=0.2)", "-{a}",
         "exp(tanh({a}))", "expm1(sin({a}))", "log({a} * {a} + 1.0)", "log1p(square({a}))",
         "sqrt(square({a}) + 0.5)", "rsqrt(square({a}) + 0.5)",
         "reciprocal(square({a}) + 1.0)", "(square({a}) + 0.5) ** 1.5",
         "clip({a}, -0.5, 0.7)", "round({a}) * {a}", "floor({a}) + {a}", "sign({a}) * {a}",
         "ceil({a}) - {a}", "{a} + stop_gradient({a}) - stop_gradient({a})", "cast({a}, f64)",
         "{a} * zeros_like({a}) + ones_like({a})", "2.0 * {a} - 1.0"]
BINARY = ["{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / (square({b}) + 1.0)",
          "maximum({a}, {b})", "minimum({a}, {b})", "where({a} > {b}, {a}, {b} * 2.0)",
          "where({a} <= 0.1, sin({b}), {a})", "(square({a}) + 1.0) ** tanh({b})",
          "bce_with_logits({a}, sigmoid({b}))", "bce(sigmoid({a}), sigmoid({b}))"]
REDUCTIONS = ["sum", "mean", "max", "min", "logsumexp", "var"]


def fmt_type(shape) -> str:
    return "f64" if not shape else f"f64[{', '.join(map(str, shape))}]"


def broadcasts(a, b) -> tuple | None:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


class Gen:
    """Emits statements into `lines`, tracking each variable's shape."""

    def __init__(self, draw, pool: dict, helpers: list):
        self.draw, self.pool, self.lines, self.helpers = draw, dict(pool), [], helpers
        self.count = 0

    def pick(self, where=None):
        names = [n for n, s in self.pool.items() if where is None or where(s)]
        if not names:
            return None
        return self.draw(st.sampled_from(sorted(names)))

    def bind(self, expr: str, shape: tuple, indent: str = "    ") -> str:
        name = f"v{self.count}"
        self.count += 1
        self.lines.append(f"{indent}{name} = {expr}")
        self.pool[name] = tuple(shape)
        return name

    # -- one statement ------------------------------------------------------------------
    def step(self) -> None:
        kind = self.draw(st.sampled_from(["unary", "binary", "binary", "reduce", "linalg",
                                          "shape", "nn", "call", "loop"]))
        getattr(self, kind)()

    def unary(self):
        a = self.pick()
        self.bind(self.draw(st.sampled_from(UNARY)).format(a=a), self.pool[a])

    def binary(self):
        a = self.pick()
        b = self.pick(lambda s: broadcasts(self.pool[a], s) is not None)
        shape = broadcasts(self.pool[a], self.pool[b])
        self.bind(self.draw(st.sampled_from(BINARY)).format(a=a, b=b), shape)

    def reduce(self):
        a = self.pick()
        shape = self.pool[a]
        op = self.draw(st.sampled_from(REDUCTIONS))
        keep = self.draw(st.booleans())
        axes = self.draw(st.lists(st.integers(0, max(len(shape) - 1, 0)), unique=True,
                                  max_size=len(shape))) if shape else []
        if axes:
            axis = axes[0] if len(axes) == 1 else "[" + ", ".join(map(str, axes)) + "]"
            out = tuple(1 if k in axes else d for k, d in enumerate(shape) if keep or k not in axes)
            self.bind(f"{op}({a}, axis={axis}, keepdims={'true' if keep else 'false'})", out)
        else:
            self.bind(f"{op}({a})", ())

    def linalg(self):
        a = self.pick(lambda s: 1 <= len(s) <= 2)
        if a is None:
            return self.unary()
        s = self.pool[a]
        b = self.pick(lambda t: t == s)
        choice = self.draw(st.integers(0, 2))
        if len(s) == 1:
            self.bind(f"{a} @ {b}", ())
        elif choice == 0:
            self.bind(f"transpose({a}) @ {b}", (s[1], s[1]))
        elif choice == 1:
            self.bind(f'einsum("ij,ij->i", {a}, {b})', (s[0],))
        else:
            self.bind(f"{a} @ transpose({b})", (s[0], s[0]))

    def shape(self):
        a = self.pick()
        s = self.pool[a]
        options = ["reshape", "expand", "broadcast"] + (["transpose", "concat", "stack",
                                                        "index", "slice", "take"] if s else [])
        if s and 1 in s:
            options.append("squeeze")
        kind = self.draw(st.sampled_from(options))
        size = int(np.prod(s)) if s else 1
        if kind == "reshape":
            self.bind(f"reshape({a}, [-1])", (size,))
        elif kind == "expand":
            self.bind(f"expand_dims({a}, 0)", (1,) + s)
        elif kind == "broadcast":
            self.bind(f"broadcast_to({a}, [2{''.join(f', {d}' for d in s)}])", (2,) + s)
        elif kind == "transpose":
            self.bind(f"transpose({a})", s[::-1])
        elif kind == "squeeze":
            k = s.index(1)
            self.bind(f"squeeze({a}, {k})", s[:k] + s[k + 1:])
        elif kind in ("concat", "stack"):
            b = self.pick(lambda t: t == s)
            if kind == "concat":
                self.bind(f"concat([{a}, {b}], axis=0)", (2 * s[0],) + s[1:])
            else:
                self.bind(f"stack([{a}, {b}], axis=-1)", s + (2,))
        elif kind == "index":
            self.bind(f"{a}[-1]", s[1:])
        elif kind == "slice":
            n = len(range(s[0])[::-1][:2])
            self.bind(f"{a}[:2][::-1]", (n,) + s[1:])
        else:
            self.bind(f"take({a}, ids)", (3,) + s[1:])

    def nn(self):
        a = self.pick(lambda s: len(s) >= 1)
        if a is None:
            return self.unary()
        s = self.pool[a]
        b = self.pick(lambda t: t == s)
        kind = self.draw(st.sampled_from(["softmax", "log_softmax", "layernorm", "mse",
                                          "cross_entropy"]))
        if kind in ("softmax", "log_softmax"):
            self.bind(f"{kind}({a}, axis={self.draw(st.integers(-len(s), len(s) - 1))})", s)
        elif kind == "layernorm":
            g = self.pick(lambda t: t == (s[-1],))
            gamma = g if g is not None else f"ones([{s[-1]}], dtype=f64)"
            self.bind(f"layernorm({a}, {gamma}, 0.5 * {gamma})", s)
        elif kind == "mse":
            self.bind(f"mse({a}, {b})", ())
        else:
            self.bind(f"cross_entropy({a}, softmax({b}, axis=-1))", s[:-1])

    def call(self):
        a = self.pick()
        b = self.pick(lambda t: broadcasts(self.pool[a], t) is not None)
        sa, sb = self.pool[a], self.pool[b]
        out = broadcasts(sa, sb)
        name = f"g{len(self.helpers)}"
        body = self.draw(st.sampled_from(BINARY)).format(a="p", b="q")
        inner = self.draw(st.sampled_from(UNARY)).format(a="r")
        self.helpers.append(f"def {name}(p: {fmt_type(sa)}, q: {fmt_type(sb)}) -> "
                            f"{fmt_type(out)} {{\n    r = {body}\n    return {inner}\n}}\n")
        self.bind(f"{name}({a}, {b})", out)

    def loop(self):
        h = self.pick()
        s = self.pool[h]
        n = self.draw(st.integers(1, 3))
        c = self.pick(lambda t: broadcasts(s, t) == s)
        xs = self.pick(lambda t: len(t) >= 1 and t[0] >= n and broadcasts(s, t[1:]) == s)
        carry = self.bind(h, s)
        acc = self.bind("zeros([], dtype=f64)", ())
        update = f"tanh({carry} * {c}) + 0.5 * {carry}"
        if xs is not None:
            update += f" + sin({xs}[i])"
        self.lines += [f"    for i in range({n}) {{",
                       f"        {carry} = {update}",
                       f"        {acc} = {acc} + mean({carry} * {carry})",
                       "    }"]


DIMS = st.lists(st.integers(1, 3), max_size=2).map(tuple)


@st.composite
def programs(draw, max_steps: int = 7):
    """``(TDSL source of f, {input name: shape})`` for a random program."""
    n_in = draw(st.integers(1, 3))
    first = draw(DIMS)
    shapes = {"x0": first}
    for k in range(1, n_in):
        # suffixes of an earlier shape broadcast against it; others are independent
        base = shapes[draw(st.sampled_from(sorted(shapes)))]
        shapes[f"x{k}"] = draw(st.one_of(st.just(base[draw(st.integers(0, len(base))):]),
                                         DIMS))
    helpers: list[str] = []
    gen = Gen(draw, shapes, helpers)
    for _ in range(draw(st.integers(1, max_steps))):
        gen.step()
    names = list(gen.pool)
    last = names[-1]
    extra = draw(st.lists(st.sampled_from(names), max_size=3))
    total = " + ".join(f"sum({v})" for v in [last] + extra)
    params = ", ".join(f"{n}: {fmt_type(s)}" for n, s in shapes.items())
    src = "".join(helpers) + (
        f"def f({params}, ids: i64[3]) -> ({fmt_type(gen.pool[last])}, f64) {{\n"
        + "\n".join(gen.lines) + f"\n    return {last}, {total}\n}}\n")
    return src, shapes


@settings(max_examples=40, deadline=None, derandomize=True)
@given(programs())
def test_generated_programs_compile(program):
    src, shapes = program
    m = compile_source(src, "<random>")
    assert [a.name for a in m["f"].args] == list(shapes) + ["ids"]
