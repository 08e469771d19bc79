"""The torch.export importer: a PyTorch module as a readable TDSL program (`from_torch`).

The module is exported with `torch.export.export` and decomposed to the core ATen op set
(`run_decompositions()`); `graph` walks the exported graph and `table` holds one lowering
entry per ATen overload (filled by `ops_math`, `ops_nn` and `ops_shape`). Nothing of the
module runs but torch's own exporter.
"""
from __future__ import annotations

from ...diagnostics import AdcError
from ..importer.imported import Imported


def _dim_names(example_args, dynamic_shapes) -> dict:
    """torch.export.Dim names by the symbol each becomes (``s0`` -> ``B``), read from the
    exported inputs later; here the Dims by (input index, axis)."""
    out = {}
    if dynamic_shapes is None:
        return out
    items = list(dynamic_shapes.values()) if isinstance(dynamic_shapes, dict) else \
        list(dynamic_shapes)
    for i, spec in enumerate(items):
        if isinstance(spec, dict):
            pairs = spec.items()
        elif isinstance(spec, (list, tuple)):
            pairs = enumerate(spec)
        else:
            continue
        for axis, dim in pairs:
            name = getattr(dim, "__name__", None)
            if name:
                out[(i, axis)] = name
    return out


def from_torch(module, example_args, dynamic_shapes=None, *, loss: str | None = None,
               fn: str = "model") -> Imported:
    """Import `module` called on `example_args` (a tuple) through torch.export;
    `dynamic_shapes` as `torch.export.export` takes it (a ``torch.export.Dim`` axis becomes
    a symbolic dimension of that name)."""
    try:
        import torch
    except ImportError:
        raise AdcError("from_torch needs PyTorch (pip install torch)") from None
    from ..tdsl import compile_source
    from .graph import ExportImporter
    label = type(module).__name__
    args = example_args if isinstance(example_args, tuple) else (example_args,)
    try:
        ep = torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
        ep = ep.run_decompositions()
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AdcError(f"{label}: torch.export cannot export the module: "
                       f"{type(e).__name__}: {first}") from None
    names = {}
    users = [s for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    by_node = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for (i, axis), dim in _dim_names(args, dynamic_shapes).items():
        if i < len(users):
            val = by_node[users[i].arg.name].meta.get("val")
            if val is not None and axis < len(val.shape):
                names[str(val.shape[axis])] = dim
    imp = ExportImporter(ep, label, fn, names)
    writer = imp.run()
    source = writer.source([f"imported from the PyTorch module {label} (torch.export)"],
                           loss=loss)
    try:
        compiled = compile_source(source, f"{label}.tdsl")
    except AdcError as e:
        raise AdcError(f"{label}: the imported program does not compile: {e.message}") \
            from None
    return Imported(source, fn, [r.name for r in writer.inputs], writer.param_values(),
                    [n for _, n in writer.results], compiled,
                    [p.name for p in writer.params if not p.trainable],
                    {**{p.name: p.source for p in writer.params},
                     **{s.name: s.source for s in writer.states}}, writer.state_values())


__all__ = ["from_torch"]
