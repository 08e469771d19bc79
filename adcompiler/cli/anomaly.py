"""``--detect-anomaly`` (``adc run`` and ``adc train``): run with `AnomalyExecutor`, which
stops at the first op whose result holds a NaN or an Inf and reports it at the op's line."""
from __future__ import annotations


def add_anomaly_argument(parser) -> None:
    parser.add_argument("--detect-anomaly", action="store_true",
                        help="stop at the first op, forward or adjoint, whose result holds "
                             "a NaN or an Inf, and report it at its source line (checks "
                             "every op: slower; ops run one by one, unfused)")


def anomaly_executor(on: bool):
    """The executor class for ``--detect-anomaly``: None (the plain one) when off."""
    if not on:
        return None
    from adc_runtime.anomaly import AnomalyExecutor
    return AnomalyExecutor
