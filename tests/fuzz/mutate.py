"""Inputs for the fuzz target: TDSL and IR text mutated from the samples and the
conformance programs, with the constructs that break compilers pushed to extremes.

Strategies: token edits (delete, duplicate, swap, replace, insert), character edits with
line-breaking and control characters (NUL, form feed, U+2028, ...), splices of one
program into another, deep nesting of every construct (parentheses, unary minus, lists,
calls, indexing, loops, ``**`` chains, long sums), huge literals, edits of printed IR
(its tokens, its locations, and attribute values of every kind put where another kind
belongs), and token or character soup."""
from __future__ import annotations

import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEEDS = sorted(ROOT.glob("tests/fuzz/seeds/*.tdsl"))   # this round's ops and groups
SOURCES = sorted([*ROOT.glob("samples/*.tdsl"), *ROOT.glob("tests/conformance/programs/*.tdsl"),
                  *SEEDS])
TOKEN = re.compile(r"\s+|#[^\n]*|[A-Za-z_][A-Za-z0-9_]*|\d+\.?\d*(?:[eE][-+]?\d+)?|"
                   r"\"[^\"\n]*\"|%[A-Za-z0-9_]+|@[A-Za-z0-9_]+|\*\*|->|<=|>=|==|!=|.", re.S)
ODD = ["\x00", "\f", "\v", "\r", "\r\n", "\u2028", "\u2029", "\x85", "\x1c", "\t", "\ufeff",
       "é", "\\", '"', "#", "\udcff", "\U0001f600", "\x7f"]
WORDS = ["def", "grad", "tangent", "param", "for", "in", "range", "return", "true", "false",
         "f16", "f32", "f64", "i32", "i64", "bool", "(", ")", "[", "]", "{", "}", ",", ":",
         "=", "@", "**", "-", "+", "*", "/", "<", "==", "->", ".", ";", "\n", "0", "1", "-1",
         "2", "0.5", "1e-3", "x", "i", "B", "T", "N", "sum", "mean", "max", "einsum",
         "reshape", "transpose", "softmax", "take", "where", "cast", "concat", "stack",
         "axis=", "keepdims=true", "[:", "::-1]", "1:", '"ij,jk->ik"', "stop_gradient",
         "zeros", "ones", "full", "arange", "one_hot", "cross_entropy", "layernorm"]
# attribute values of each kind, for options that take another (`attr_edits`)
ATTR_VALUES = ["yes", "not a dim", "", "f32", "f99", "B", "none", True, False, None, 1.5, -1,
               0, 1, 2, 3, -7, 2 ** 31, 2 ** 63, -2 ** 63 - 1, 10 ** 30, float("nan"),
               float("inf"), -0.0, [], [1], [0, 0], ["a"], [[1]], [1.5, 2], [None], [-1, 2],
               (), (1,), (1, "a"), (0, -1), ("B", 3), {"a": 1}, {"m.l": "L"}, {"a": [1]}]
HUGE = ["9" * 25, "9" * 401, "1e999", "1e-999", "0." + "0" * 400 + "1", "4294967296",
        "18446744073709551616", "1000000000000", "2147483648", "65536", "0", "-0"]


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


class Mutator:
    """Draws fuzz inputs from a seed: ``next_case()`` -> (kind, text), kind "tdsl", "ir",
    "data" or, given a folder for its seeds, "train" (`train_cases`)."""

    def __init__(self, seed: int, ir_texts: list[str] | None = None,
                 sizes: tuple[int, ...] = (10, 50, 100, 300), train_dir=None):
        self.rng = random.Random(seed)
        self.train = None
        if train_dir is not None:
            from train_cases import TrainCases
            self.train = TrainCases(random.Random(seed + 2), Path(train_dir))
        self.sizes = sizes  # of the nesting strategy
        self.texts = [p.read_text(encoding="utf-8") for p in SOURCES]
        self.ir = ir_texts or []
        pool = {t for s in self.texts for t in tokens(s) if not t.isspace()}
        self.pool = sorted(pool) + WORDS

    # -- strategies ----------------------------------------------------------------------
    def token_edits(self, text: str, pool: list[str]) -> str:
        rng, toks = self.rng, tokens(text)
        for _ in range(rng.randint(1, 4)):
            if not toks:
                toks = [rng.choice(pool)]
            k = rng.randrange(len(toks))
            r = rng.random()
            if r < 0.2:
                del toks[k:k + rng.randint(1, 3)]
            elif r < 0.3:
                toks.insert(k, toks[k])
            elif r < 0.4 and k + 1 < len(toks):
                toks[k], toks[k + 1] = toks[k + 1], toks[k]
            elif r < 0.65:
                toks[k] = rng.choice(pool)
            elif r < 0.75 and toks[k][:1].isdigit():
                toks[k] = rng.choice(HUGE + ["0", "1", "3", "7", "2.5"])
            elif r < 0.9:
                toks.insert(k, rng.choice(pool))
            else:
                j = rng.randrange(len(toks))
                toks[k:k] = toks[j:j + rng.randint(1, 12)]
        return "".join(toks)

    def char_edits(self, text: str) -> str:
        rng, chars = self.rng, list(text)
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(len(chars) + 1)
            c = rng.choice(ODD) if rng.random() < 0.7 else chr(rng.randrange(32, 127))
            r = rng.random()
            if r < 0.5:
                chars.insert(k, c)
            elif r < 0.8 and k < len(chars):
                chars[k] = c
            elif k < len(chars):
                del chars[k]
        return "".join(chars)

    def splice(self, text: str) -> str:
        other = self.rng.choice(self.texts)
        a, b = sorted(self.rng.randrange(len(other) + 1) for _ in range(2))
        k = self.rng.randrange(len(text) + 1)
        return text[:k] + other[a:b] + text[k:]

    def nesting(self) -> str:
        """A valid-looking program with one construct nested or repeated `n` times."""
        rng = self.rng
        n = rng.choice(self.sizes)
        kind = rng.choice(["paren", "neg", "list", "call", "index", "for", "pow", "sum",
                           "let", "comment_breaks"])
        body = {
            "paren": "y = " + "(" * n + "x" + ")" * n,
            "neg": "y = " + "-" * n + "x",
            "list": "y = x + sum(" + "[" * n + "1.0" + "]" * n + ")",
            "call": "y = " + "exp(" * n + "x" + ")" * n,
            "index": "y = x" + "[0]" * min(n, 70) + " + x",
            "for": "".join(f"for i{k} in range(1) {{\n" for k in range(min(n, 300))) +
                   "y = y + x\n" + "}\n" * min(n, 300),
            "pow": "y = x" + " ** 1.0" * n,
            "sum": "y = x" + " + x" * n,
            "let": "".join(f"y = y * 1.0 + x\n" for _ in range(n)),
            "comment_breaks": "# \f\u2028\x85\x00\v\n" * min(n, 100) + "y = y + x",
        }[kind]
        return (f"def f(param x: f32[3]) -> f32 {{\n    y = x\n    {body}\n"
                f"    return sum(y)\n}}\n")

    def random_text(self) -> str:
        """No program at all: a soup of tokens, or of characters that TDSL uses."""
        rng = self.rng
        if rng.random() < 0.5:
            return "".join(rng.choice(self.pool) for _ in range(rng.randint(0, 60)))
        alphabet = "abcdefxyz_019()[]{},:;=+-*/@<>.\"# \n\t"
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200)))

    def attr_edits(self, text: str) -> str:
        """Printed IR with attribute values replaced by values of any kind: of an op's
        options (`keepdims = "yes"`, `n = "not a dim"` on a loop, a string `value` of a
        constant) or of a function (`stacked`, `wrt`)."""
        from adcompiler.ir.parser import parse_module
        from adcompiler.ir.printer import print_module
        rng = self.rng
        module = parse_module(text)
        owners = []   # ops and functions, whose attrs are replaced (never changed)
        for f in module.functions.values():
            owners.append(f)
            stack = list(f.body.ops)
            while stack:
                op = stack.pop()
                owners.append(op)
                stack.extend(o for r in op.regions for o in r.ops)
        with_attrs = [o for o in owners if o.attrs]
        for _ in range(rng.randint(1, 3)):
            owner = rng.choice(with_attrs) if with_attrs and rng.random() < 0.9 else \
                rng.choice(owners)
            key = rng.choice(list(owner.attrs)) if owner.attrs and rng.random() < 0.85 else \
                rng.choice(["n", "axis", "keepdims", "value", "dtype", "shape", "stride",
                            "recompute", "stacked", "extra"])
            owner.attrs = {**owner.attrs, key: rng.choice(ATTR_VALUES)}
        try:
            return print_module(module)
        except TypeError:   # a value the printer cannot write: not an IR file
            return text

    def ir_edits(self, text: str) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.35:
            return self.attr_edits(text)
        if r < 0.6:
            return self.token_edits(text, tokens(text) + WORDS + HUGE)
        if r < 0.75:
            return self.char_edits(text)
        if r < 0.88:  # a huge number in a location or an attribute
            return re.sub(r":(\d+):(\d+)\)", lambda m: f":{rng.choice(HUGE)}:{m[2]})",
                          text, count=1)
        n = rng.choice([10, 70, 1000, 50000])  # attribute nesting: refused beyond 64
        return re.sub(r" : ", " {a = " + "[" * n + "1" + "]" * n + "} : ", text, count=1)

    def data(self) -> str:
        """A sample's input file, mutated: "PROGRAM\0JSON TEXT" (or an .npz's bytes in
        latin-1 when the JSON part starts with "PK")."""
        rng = self.rng
        prog = rng.choice([p for p in SOURCES if p.with_suffix(".json").exists()])
        text = prog.with_suffix(".json").read_text()
        r = rng.random()
        if r < 0.4:
            text = self.token_edits(text, tokens(text) + HUGE + ["NaN", "Infinity", "[", "]",
                                                                 "{", "}", '"x"', ":", ",",
                                                                 "null", "true", "1e999"])
        elif r < 0.6:
            text = self.char_edits(text)
        elif r < 0.8:  # an .npz made from the JSON, then damaged
            import io
            import json
            import numpy as np
            b = io.BytesIO()
            np.savez(b, **{k: np.asarray(v) for k, v in json.loads(text).items()})
            raw = bytearray(b.getvalue())
            for _ in range(rng.randint(1, 4)):
                if not raw:
                    break
                k = rng.randrange(len(raw))
                if rng.random() < 0.3:
                    del raw[k:]
                else:
                    raw[k] = rng.randrange(256)
            text = raw.decode("latin-1")
        else:
            n = rng.choice([70, 5000, 100000])
            text = text.replace("[", "[" * n, 1).replace("]", "]" * n, 1) \
                if rng.random() < 0.5 else text.replace("1", "1" + "0" * n, 1)
        return f"{prog}\0{text}"

    def next_case(self) -> tuple[str, str]:
        rng = self.rng
        if self.ir and rng.random() < 0.2:
            return "ir", self.ir_edits(rng.choice(self.ir))
        if self.train is not None and rng.random() < 0.15:
            return "train", self.train.case(self.tdsl_edit)
        if rng.random() < 0.1:
            return "data", self.data()
        return "tdsl", self.tdsl_case()

    def tdsl_edit(self, text: str) -> str:
        """`text` with token or character edits."""
        return self.token_edits(text, self.pool) if self.rng.random() < 0.7 else \
            self.char_edits(text)

    def tdsl_case(self) -> str:
        """TDSL text: a program mutated by one of the strategies, or a nested one."""
        rng = self.rng
        r = rng.random()
        base = rng.choice(self.texts)
        if r < 0.45:
            return self.token_edits(base, self.pool)
        if r < 0.65:
            return self.char_edits(base)
        if r < 0.75:
            return self.splice(base)
        if r < 0.9:
            return self.nesting()
        return self.char_edits(self.token_edits(base, self.pool))
