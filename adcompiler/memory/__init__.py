"""The memory and cost model of IR programs: value sizes, predicted peak live bytes, FLOPs.

The prediction follows the runtime's accounting (`adc_runtime.executor`) exactly; see
`liveness` for the convention.
"""
from .flops import function_flops, op_flops  # noqa: F401
from .liveness import MemoryProfile, predict_peak  # noqa: F401
from .sizes import format_bytes, parse_size, value_bytes  # noqa: F401
