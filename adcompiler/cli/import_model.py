"""``adc import MODEL.onnx -o MODEL.tdsl [--loss cross_entropy|mse]``: an ONNX model as a
TDSL program, with its parameters in ``MODEL.params.npz`` beside it.

Both files are written only when the whole import succeeded, each atomically; an error (an
unsupported node, a file that is not ONNX, missing external data, initializers over
``--max-memory``) is one line naming the model and exits 1.
"""
from __future__ import annotations

import os
import sys

from ..diagnostics import AdcError, render
from ..frontend.importer.losses import LOSSES


def add_import_command(subparsers) -> None:
    from .argtypes import memory_size
    p = subparsers.add_parser(
        "import", help="import an ONNX model as a TDSL program and its parameters",
        description="Write MODEL.onnx as a readable TDSL program (-o MODEL.tdsl) and its "
                    "initializers as MODEL.params.npz beside it; train it with "
                    "'adc train MODEL.tdsl --fn loss --init MODEL.params.npz' after "
                    "importing with --loss.")
    p.add_argument("file", metavar="MODEL", help="an ONNX model (.onnx)")
    p.add_argument("-o", "--output", metavar="OUT.tdsl", required=True,
                   help="the TDSL program to write; the parameters go to "
                        "OUT.params.npz beside it")
    p.add_argument("--loss", choices=sorted(LOSSES),
                   help="add a function 'loss' (inputs, 'target', params) returning the "
                        "mean loss of the model's output")
    p.add_argument("--fn", metavar="NAME", default="model",
                   help="the name of the model's function (default model)")
    p.add_argument("--max-memory", metavar="SIZE", type=memory_size,
                   help="refuse a model whose initializers need more than SIZE "
                        "(default: 75%% of this machine's memory)")
    p.add_argument("--debug", action="store_true", default=False,
                   help="show Python tracebacks")
    p.set_defaults(func=import_main, parser=p, bind=[])


def import_main(args) -> int:
    from ..frontend.onnx import from_onnx
    from ..memory.limit import current_limit
    if not args.fn.isidentifier() or args.fn in ("loss",):
        raise AdcError(f"--fn: '{args.fn}' is not a usable function name")
    try:
        imported = from_onnx(args.file, loss=args.loss, fn=args.fn,
                             max_memory=current_limit())
    except AdcError as e:
        print(render(e), file=sys.stderr)   # the model is binary: no source line to show
        return 1
    tdsl, npz = imported.save(args.output)
    n = sum(int(v.size) for v in imported.params.values())
    print(f"wrote {tdsl} ({len(imported.source.splitlines())} lines, function "
          f"'{imported.fn}') and {os.path.basename(npz)} ({len(imported.params)} params, "
          f"{n} values)")
    return 0
