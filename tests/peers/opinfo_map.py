"""Every adc op with a PyTorch counterpart, mapped to its OpInfo in PyTorch's ``op_db``.

``MAP`` holds one `Entry` per OpInfo (``name`` or ``name.variant``): the adc op it checks and
a translator that writes a sample as a TDSL expression through a `Call` (``opinfo_call``).
A sample is translated when an adc call with the same meaning exists; otherwise the
translator writes the call as PyTorch gives it and records the reason, and adc must refuse
it with a located error. Where adc's documented convention at a kink differs from PyTorch's,
the entry says so (``convention``) and names the samples that reach the kink (``kink``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import opinfo_nn as nn
from opinfo_call import Call
import opinfo_tensor as ts


@dataclass(frozen=True)
class Entry:
    adc: str                                   # the adc op checked
    translate: Callable[[Call, object], str]   # (call, sample) -> TDSL expression
    convention: str = ""                       # where adc deliberately differs from PyTorch
    kink: Callable[[object], bool] | None = None  # does a sample reach that kink


SPLIT_TIES = ("adc splits the gradient of a reduced slice equally among its tied maxima "
              "(tdsl.md section 5); PyTorch's max(x, dim) sends all of it to the index it "
              "returns")

UNARY = ["neg", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "abs", "sign", "sin", "cos",
         "tanh", "sigmoid", "square", "reciprocal", "erf", "floor", "ceil"]

MAP: dict[str, Entry] = {name: Entry(name, ts.unary(name)) for name in UNARY}
MAP.update({
    "round": Entry("round", ts.unary("round", {"decimals": 0})),
    "round.decimals_0": Entry("round", ts.unary("round", {"decimals": 0})),
    "round.decimals_3": Entry("round", ts.unary("round", {"decimals": 0})),
    "round.decimals_neg_3": Entry("round", ts.unary("round", {"decimals": 0})),
    "nn.functional.relu": Entry("relu", ts.unary("relu", {"inplace": False})),
    "nn.functional.softplus": Entry("softplus",
                                    ts.unary("softplus", {"beta": 1, "threshold": 20})),
    "nn.functional.gelu": Entry("gelu", ts.gelu),
    "nn.functional.leaky_relu": Entry("leaky_relu", ts.leaky_relu),
    "add": Entry("add", ts.binary("add")),
    "sub": Entry("sub", ts.binary("sub")),
    "mul": Entry("mul", ts.binary("mul")),
    "div.no_rounding_mode": Entry("div", ts.div),
    "div.trunc_rounding": Entry("div", ts.div),
    "div.floor_rounding": Entry("div", ts.div),
    "true_divide": Entry("div", ts.binary("div")),
    "pow": Entry("pow", ts.binary("pow")),
    "maximum": Entry("maximum", ts.binary("maximum")),
    "minimum": Entry("minimum", ts.binary("minimum")),
    "max.binary": Entry("maximum", ts.binary("maximum")),
    "min.binary": Entry("minimum", ts.binary("minimum")),
    "clamp": Entry("clip", ts.clamp),
    "where": Entry("where", ts.where),
    **{name: Entry(name, ts.binary(name)) for name in ("eq", "ne", "lt", "le", "gt", "ge")},
    "zeros_like": Entry("zeros_like", ts.like("zeros_like")),
    "ones_like": Entry("ones_like", ts.like("ones_like")),
    "__getitem__": Entry("index", ts.getitem),
    "sum": Entry("sum", ts.reduce("sum")),
    "mean": Entry("mean", ts.reduce("mean")),
    "amax": Entry("max", ts.reduce("max")),
    "amin": Entry("min", ts.reduce("min")),
    "max.reduction_no_dim": Entry("max", ts.reduce("max")),
    "min.reduction_no_dim": Entry("min", ts.reduce("min")),
    "max.reduction_with_dim": Entry("max", ts.reduce_with_dim("max"), SPLIT_TIES, ts.ties_along),
    "min.reduction_with_dim": Entry("min", ts.reduce_with_dim("min"),
                                    SPLIT_TIES.replace("maxima", "minima").replace("max(", "min("),
                                    ts.ties_along),
    "logsumexp": Entry("logsumexp", ts.reduce("logsumexp")),
    "var": Entry("var", ts.var),
    "var.unbiased": Entry("var", ts.var),
    "argmax": Entry("argmax", ts.arg_extremum("argmax")),
    "argmin": Entry("argmin", ts.arg_extremum("argmin")),
    "cumsum": Entry("cumsum", ts.cumsum),
    "matmul": Entry("matmul", ts.matmul),
    "mm": Entry("matmul", ts.matmul),
    "bmm": Entry("matmul", ts.matmul),
    "mv": Entry("matmul", ts.matmul),
    "dot": Entry("matmul", ts.matmul),
    "einsum": Entry("einsum", ts.einsum),
    "transpose": Entry("transpose", ts.transpose),
    "permute": Entry("transpose", ts.permute),
    "t": Entry("transpose", ts.t),
    "mT": Entry("transpose", ts.mT),
    "movedim": Entry("transpose", ts.movedim),
    "reshape": Entry("reshape", ts.reshape),
    "view": Entry("reshape", ts.reshape),
    "reshape_as": Entry("reshape", ts.reshape_as),
    "view_as": Entry("reshape", ts.reshape_as),
    "broadcast_to": Entry("broadcast_to", ts.broadcast_to),
    "expand": Entry("broadcast_to", ts.expand),
    "expand_as": Entry("broadcast_to", ts.expand_as),
    "unsqueeze": Entry("expand_dims", ts.unsqueeze),
    "squeeze": Entry("squeeze", ts.squeeze),
    "squeeze.multiple": Entry("squeeze", ts.squeeze),
    "cat": Entry("concat", ts.cat),
    "hstack": Entry("concat", ts.hstack),
    "stack": Entry("stack", ts.stack),
    "softmax": Entry("softmax", nn.softmax("softmax")),
    "softmax.with_dtype": Entry("softmax", nn.softmax("softmax")),
    "log_softmax": Entry("log_softmax", nn.softmax("log_softmax")),
    "log_softmax.with_dtype": Entry("log_softmax", nn.softmax("log_softmax")),
    "nn.functional.cross_entropy": Entry("cross_entropy", nn.cross_entropy),
    "nn.functional.binary_cross_entropy": Entry("bce", nn.bce("bce")),
    "nn.functional.binary_cross_entropy_with_logits": Entry("bce_with_logits",
                                                            nn.bce("bce_with_logits")),
    "nn.functional.mse_loss": Entry("mse", nn.mse_loss),
    "nn.functional.layer_norm": Entry("layernorm", nn.layer_norm),
    "nn.functional.rms_norm": Entry("rmsnorm", nn.rms_norm),
    "nn.functional.batch_norm": Entry("batchnorm", nn.batch_norm),
    "nn.functional.batch_norm.without_cudnn": Entry("batchnorm", nn.batch_norm),
    "nn.functional.scaled_dot_product_attention": Entry("attention", nn.sdpa),
    "nn.functional.embedding": Entry("take", nn.embedding),
    "index_select": Entry("take", nn.index_select),
    "nn.functional.conv1d": Entry("conv1d", nn.conv(1)),
    "nn.functional.conv2d": Entry("conv2d", nn.conv(2)),
    "nn.functional.conv_transpose2d": Entry("conv_transpose2d", nn.conv_transpose2d),
    "nn.functional.max_pool2d": Entry("max_pool2d", nn.max_pool2d),
    "nn.functional.avg_pool2d": Entry("avg_pool2d", nn.avg_pool2d),
    "nn.functional.pad.constant": Entry("pad", nn.pad),
})

# adc ops with no OpInfo counterpart to check them against, and why
UNMAPPED = {
    "cast": "a dtype change: float64 samples would only cast float64 to float64",
    "one_hot": "its OpInfo has integer samples only (no float64 autograd samples)",
    "stop_gradient": "no OpInfo (`detach` is not in op_db)",
    "const": "a literal", "zeros": "a constructor", "ones": "a constructor",
    "full": "a constructor", "arange": "a constructor",
    "dropout": "random: PyTorch draws other bits (adc's own tests check its mask and adjoint)",
    "uniform": "random, a constructor", "normal": "random, a constructor",
    "bernoulli": "random", "rng_fold": "random: a key derivation",
    "max_pool2d_indices": "no OpInfo of its own: nn.functional.max_pool2d's return_indices "
                          "samples compare their indices with it",
    "batchnorm_running": "the running statistics, which PyTorch's batch_norm updates in place "
                         "rather than returns",
}
# ops that only derivative programs use (not TDSL built-ins; docs/ops.md's second table)
INTERNAL = {"sum_to", "index_grad", "split", "conv_input_grad", "conv_weight_grad",
            "max_pool2d_grad", "max_pool2d_select", "avg_pool2d_grad", "take_grad",
            "dim_value", "allreduce_start", "allreduce_wait"}
