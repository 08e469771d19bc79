"""Fuzz inputs for ``adc train``: a program, its data, initial values, a checkpoint and the
command's options, damaged the ways a careless user or an attacker would.

A case is JSON text (what a failure saves): ``{"argv": [...], "files": {name: base64}}``;
the target writes the files into a fresh folder and replaces ``{dir}`` in the arguments
with it. The seeds (valid data, the parameters and a checkpoint of a short run of each
program) are made once, by ``adc train`` itself.

Data files: rows of every count down to 0, a 0-d array, an array left out or added, other
dtypes (object arrays too), rows that disagree, NaN and Inf, labels out of range, headers
that declare more than the memory limit or than the bytes hold, compressed members that
inflate far (decompression bombs), bytes damaged. Checkpoints: ``meta`` fields removed,
mistyped or out of range (step -5), arrays removed, reshaped or retyped, another model's.
Options: every option of ``adc train`` with values in and out of range, repeated keys,
outputs on the inputs, on folders, on devices and in missing folders, inputs that are
devices or links to them.
"""
from __future__ import annotations

import base64
import io
import json
import random
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# program, its data arrays (name -> dtype, shape after the rows, label bound), --bind
PROGRAMS = {
    "samples/mlp.tdsl": ({"x": ("f4", (4,), 0), "labels": ("i8", (), 3)}, []),
    "samples/f16_underflow.tdsl": ({"x": ("f4", (8,), 0), "y": ("f4", (), 0)}, []),
    "samples/deep_mlp.tdsl": ({"x": ("f4", (8,), 0)}, []),
    "samples/digits_mlp.tdsl": ({"x": ("f4", (64,), 0), "labels": ("i8", (), 10)},
                                ["--fn", "digits_mlp", "--metric", "accuracy"]),
    "tests/fuzz/seeds/conv_net.tdsl": ({"x": ("f4", (1, 8, 8), 0), "labels": ("i8", (), 3)},
                                       []),
    "tests/fuzz/seeds/grouped.tdsl": ({"x": ("f4", (3,), 0)}, ["--bind", "D=3,L=2"]),
    "tests/fuzz/seeds/attn_norm.tdsl": ({"x": ("f4", (5, 8), 0), "y": ("f4", (5, 8), 0)},
                                        []),
}
WRONG = [None, "x", "", -5, -1, 0, 1.5, float("nan"), [], {}, [1, 2], {"a": 1}, 2 ** 70,
         True, "step", -2 ** 63]
DEVICES = ["/dev/zero", "/dev/null", "/dev/full", "/dev/urandom", "/proc/self/mem", "/"]


def npz_bytes(arrays: dict, compressed: bool = False) -> bytes:
    b = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(b, **arrays)
    return b.getvalue()


def npy_header_only(name: str, shape: tuple, dtype: str = "<f4", payload: int = 16) -> bytes:
    """An .npz whose member declares `shape` but holds `payload` bytes of data."""
    header = repr({"descr": dtype, "fortran_order": False, "shape": shape})
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    raw = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + \
        b"\0" * payload
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        z.writestr(f"{name}.npy", raw)
    return b.getvalue()


def data_arrays(spec: dict, rows: int, rng: random.Random) -> dict:
    g = np.random.default_rng(rng.randrange(1 << 30))
    out = {}
    for name, (dtype, tail, bound) in spec.items():
        if dtype == "i8":
            out[name] = g.integers(0, bound, (rows, *tail))
        else:
            out[name] = g.standard_normal((rows, *tail)).astype(dtype)
    return out


class TrainCases:
    """Draws ``adc train`` cases; `seed_dir` holds the seeds made once."""

    def __init__(self, rng: random.Random, seed_dir: Path):
        self.rng = rng
        self.dir = seed_dir
        self.seeds: dict[str, dict] = {}
        bomb_rows = 3_000_000   # 36 MB of zeros in a few kB: past the 32 MiB limit
        self.bombs = [npz_bytes({"x": np.zeros((bomb_rows, 4), "f4"),
                                 "labels": np.zeros(4, "i8")}, compressed=True),
                      npz_bytes({"x": np.zeros((4, 4), "f4"),
                                 "labels": np.zeros(1_000_000, "i8")}, compressed=True)]

    def seed(self, prog: str) -> dict:
        """Valid data, the params of a one-step run and its checkpoint, for `prog`."""
        if prog in self.seeds:
            return self.seeds[prog]
        from adcompiler.cli import main
        spec, extra = PROGRAMS[prog]
        folder = self.dir / Path(prog).stem
        folder.mkdir(parents=True, exist_ok=True)
        data = npz_bytes(data_arrays(spec, 8, random.Random(0)))
        (folder / "d.npz").write_bytes(data)
        import contextlib
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            rc = main(["train", str(ROOT / prog), "--data", str(folder / "d.npz"), "--steps",
                       "2", "--batch", "4", "--save", str(folder / "p.npz"), "--checkpoint",
                       str(folder / "c.npz"), *extra])
        assert rc == 0, f"the seed run of {prog} failed"
        self.seeds[prog] = {"data": data, "params": (folder / "p.npz").read_bytes(),
                            "ckpt": (folder / "c.npz").read_bytes()}
        return self.seeds[prog]

    # -- files -------------------------------------------------------------------------
    def data_file(self, spec: dict) -> bytes:
        rng = self.rng
        rows = rng.choice([0, 1, 2, 3, 4, 5, 8, 8, 8, 16, 33])
        arrays = data_arrays(spec, rows, rng)
        r = rng.random()
        names = list(arrays)
        k = rng.choice(names)
        if r < 0.35:
            pass
        elif r < 0.4:
            arrays[k] = np.float32(1.5)                     # a 0-d array
        elif r < 0.45:
            del arrays[k]
        elif r < 0.5:
            arrays[rng.choice(["extra", "W1", "m.embed", "x.y"])] = arrays[k]
        elif r < 0.6:
            arrays[k] = arrays[k].astype(rng.choice(["f8", "f2", "i4", "bool", "u1", "c8",
                                                     "U3", "O"]))
        elif r < 0.65:
            arrays[k] = arrays[k][:max(rows - 1, 0)]        # rows that disagree
        elif r < 0.7 and arrays[k].dtype.kind == "f" and arrays[k].size:
            arrays[k].flat[0] = rng.choice([np.nan, np.inf, -np.inf, 1e38])
        elif r < 0.75 and arrays[k].dtype.kind == "i" and arrays[k].size:
            arrays[k].flat[0] = rng.choice([-1, 3, 10, 2 ** 40, -2 ** 63])
        elif r < 0.8:
            arrays[k] = arrays[k].reshape(-1) if arrays[k].ndim > 1 else arrays[k][..., None]
        elif r < 0.85:
            return rng.choice(self.bombs)
        elif r < 0.9:
            return npy_header_only(k, rng.choice([(10 ** 12, 4), (8, 4), (2 ** 62,),
                                                  (-1, 4), (8, 10 ** 9)]))
        raw = npz_bytes(arrays, compressed=rng.random() < 0.3)
        return self.damage(raw) if rng.random() < 0.1 else raw

    def damage(self, raw: bytes) -> bytes:
        rng, b = self.rng, bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            if not b:
                break
            k = rng.randrange(len(b))
            if rng.random() < 0.2:
                del b[k:]
            else:
                b[k] = rng.randrange(256)
        return bytes(b)

    def params_file(self, seed: dict) -> bytes:
        rng = self.rng
        with np.load(io.BytesIO(seed["params"])) as z:
            arrays = {k: z[k] for k in z.files}
        k = rng.choice(list(arrays))
        r = rng.random()
        if r < 0.3:
            pass
        elif r < 0.4:
            del arrays[k]
        elif r < 0.5:
            arrays[k] = np.zeros((), "f4")
        elif r < 0.6:
            arrays[k] = arrays[k].astype(rng.choice(["f8", "f2", "i8", "bool", "O"]))
        elif r < 0.7:
            arrays[k] = np.zeros((*arrays[k].shape, 2), "f4")
        elif r < 0.75:
            arrays["unknown"] = arrays[k]
        elif r < 0.8:
            return npy_header_only(k, (20000, 20000))
        elif r < 0.9:
            arrays[k] = np.full(arrays[k].shape, rng.choice([np.nan, np.inf, 1e30]), "f4")
        else:
            return self.damage(npz_bytes(arrays))
        return npz_bytes(arrays)

    def checkpoint_file(self, seed: dict, other: dict) -> bytes:
        rng = self.rng
        with np.load(io.BytesIO(seed["ckpt"])) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(str(arrays["meta"]))
        r = rng.random()
        if r < 0.2:
            pass
        elif r < 0.5:   # a field of meta (or of its nested parts) removed or mistyped
            target, path = meta, []
            while isinstance(target, dict) and target and rng.random() < 0.6:
                key = rng.choice(list(target))
                if not isinstance(target[key], dict):
                    break
                path.append(key)
                target = target[key]
            if isinstance(target, dict) and target:
                key = rng.choice(list(target))
                if rng.random() < 0.3:
                    del target[key]
                else:
                    target[key] = rng.choice(WRONG)
        elif r < 0.6:
            meta["step"] = rng.choice([-5, -1, 0, 10 ** 6, 2 ** 70, 1.5])
            meta[rng.choice(["epoch", "batch"])] = rng.choice([-1, 0, 10 ** 6, 3])
        elif r < 0.7:
            k = rng.choice([k for k in arrays if k != "meta"])
            if rng.random() < 0.5:
                del arrays[k]
            else:
                arrays[k] = np.zeros((*arrays[k].shape, 1), rng.choice(["f4", "f8", "i8"]))
        elif r < 0.75:
            return other["ckpt"]
        elif r < 0.8:
            return npz_bytes({**arrays, "meta": np.array(rng.choice(["{", "[]", "null", "1",
                                                                     '"x"']))})
        elif r < 0.85:
            return self.damage(seed["ckpt"])
        elif r < 0.9:
            del arrays["meta"]
            return npz_bytes(arrays)
        else:
            meta["rng"] = rng.choice([None, {}, {"bit_generator": "MT19937"}, "x", [1]])
        arrays["meta"] = np.array(json.dumps(meta))
        return npz_bytes(arrays)

    # -- a case ------------------------------------------------------------------------
    def case(self, mutate_program=None) -> str:
        rng = self.rng
        prog = rng.choice(list(PROGRAMS))
        spec, extra = PROGRAMS[prog]
        seed = self.seed(prog)
        other = self.seed(rng.choice(list(PROGRAMS)))
        files: dict[str, bytes] = {}
        prog_arg = str(ROOT / prog)
        if mutate_program is not None and rng.random() < 0.15:
            files["prog.tdsl"] = mutate_program((ROOT / prog).read_text()).encode(
                "utf-8", "surrogatepass")
            prog_arg = "{dir}/prog.tdsl"
        files["d.npz"] = seed["data"] if rng.random() < 0.4 else self.data_file(spec)
        argv = ["train", prog_arg, "--data", "{dir}/d.npz", "--max-memory",
                rng.choice(["32MiB", "32MiB", "1MiB", "64KiB"]), *extra]
        steps = rng.choice(["1", "2", "3"])
        if rng.random() < 0.8:
            argv += ["--steps", steps]
        elif rng.random() < 0.5:
            argv += ["--epochs", rng.choice(["1", "2"])]
        argv += self.options(files, seed, other)
        if rng.random() < 0.05:   # an option of the wrong kind anywhere
            k = rng.randrange(2, len(argv) + 1)
            argv.insert(k, rng.choice(["--steps", "--batch", "--seed", "-1", "0", "nan",
                                       "--resume", "--init", "", "--", "-"]))
        return json.dumps({"argv": argv, "files": {k: base64.b64encode(v).decode()
                                                   for k, v in files.items()}})

    def options(self, files: dict, seed: dict, other: dict) -> list[str]:
        """Options of a case: in most cases every value is one the option takes (so that
        the run reaches its steps), in the others any value."""
        rng = self.rng
        out: list[str] = []
        wild = rng.random() < 0.3

        def maybe(p: float, *opts):
            if rng.random() < p:
                out.extend(opts)

        def pick(values: list, valid: int):
            """One of `values`, whose first `valid` are values the option takes."""
            return rng.choice(values if wild else values[:valid])

        maybe(0.5, "--batch", pick(["1", "2", "3", "4", "4", "8", "9", "100"], 6))
        maybe(0.15, "--accumulate", pick(["1", "2", "3", "0"], 3))
        maybe(0.2, "--seed", pick(["0", "1", "4294967296", "-1", "18446744073709551616",
                                   "-99999999999999999999"], 3))
        maybe(0.3, "--optimizer", pick([
            "adam", "adamw", "sgd:lr=0.1,momentum=0.9", "sgd:lr=0.1,momentum=0.9,nesterov=1",
            "adam:lr=1e-3,b2=0.9", "adam:eps=0", "adam:lr=1e400", "sgd:lr=0.1,,", "adam:",
            "sgd", "adam:lr=1,lr=2", "adam:b2=1", "sgd:lr=0.1,nesterov=1", "adam:lr=nan", "adam:lr=-1", "adam:b1=2",
            "adamw:wd=0.1,weight_decay=0.2", "sgd:momentum=-1", "rmsprop", "adam:=1",
            "adam:lr"], 9))
        maybe(0.15, "--schedule", pick(["constant", "warmup:steps=1", "cosine",
                                        "cosine:warmup=1,min_lr=0.1", "warmup:steps=0",
                                        "cosine:warmup=100", "warmup:steps=-1",
                                        "warmup:steps=1,steps=2", "linear"], 4))
        maybe(0.1, "--clip", pick(["1", "0.5", "1e-30", "0", "-1", "nan", "inf"], 3))
        maybe(0.1, "--precision", rng.choice(["f16", "bf16"]))
        maybe(0.05, "--dtype", rng.choice(["f16", "f32", "f64"]))
        maybe(0.1, "--detect-anomaly")
        maybe(0.05, "--remat", rng.choice(["none", "sqrt", "revolve:2", "min-memory",
                                           "budget:4KiB"]))
        maybe(0.05, "--memory-budget", pick(["1KiB", "1MiB", "64MiB", "0"], 3))
        maybe(0.05, "--init-scheme", rng.choice(["torch", "glorot", "kaiming", "normal"]))
        maybe(0.05, "--bucket-mb", pick(["1", "0.0001", "0", "-1"], 2))
        maybe(0.03, "--wrt", rng.choice(["W1", "x", "nope", "m", "m.layers"]))
        if rng.random() < 0.2:
            files["v.npz"] = seed["data"] if rng.random() < 0.5 else \
                self.data_file(PROGRAMS[rng.choice(list(PROGRAMS))][0])
            out += ["--val", "{dir}/v.npz"]
        if rng.random() < 0.2:
            files["p.npz"] = self.params_file(seed if rng.random() < 0.8 else other)
            out += ["--init", "{dir}/p.npz"]
        if rng.random() < 0.2:
            files["c.npz"] = self.checkpoint_file(seed, other)
            out += ["--resume", "{dir}/c.npz"]
        for option, name in (("--save", "out.npz"), ("--checkpoint", "ck.npz"),
                             ("--log", "log.jsonl"), ("--plot", "plot.png")):
            if rng.random() < (0.02 if option == "--plot" else 0.2):
                out += [option, self.output_place(name)]
        maybe(0.05, "--every", pick(["1", "2", "0"], 2))
        if rng.random() < (0.1 if wild else 0.01):   # a device, a folder or a link to one
            out += [rng.choice(["--resume", "--init", "--val", "--data"]),
                    rng.choice(DEVICES + ["{dir}/link.npz", "{dir}"])]
        return out

    def output_place(self, name: str) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.7:
            return "{dir}/" + name
        return rng.choice(["{dir}", "{dir}/missing/" + name, "{dir}/d.npz", "/dev/full",
                           "/dev/null", "{dir}/link.npz", "{dir}/./d.npz"])
