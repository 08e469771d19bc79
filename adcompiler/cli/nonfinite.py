"""The warning of a run whose results hold NaN or Inf: which op produced the first one, at
which line of the program (NumPy's own RuntimeWarnings are silenced by `app.main`).

Only a run whose results are not finite pays for the search: it runs again under
`AnomalyExecutor` (the ``--detect-anomaly`` check), which stops at the first such op."""
from __future__ import annotations

import sys

import numpy as np

from ..diagnostics import AdcError, render


def warn_nonfinite(module, run_name: str, inputs: dict, dims: dict,
                   named: list[tuple[str, np.ndarray]]) -> None:
    """Print a located warning to stderr if a float result in `named` is not finite."""
    bad = [name for name, a in named
           if a.dtype.kind in "fc" and a.size and not np.isfinite(a).all()]
    if not bad:
        return
    from adc_runtime.anomaly import AnomalyExecutor
    from adc_runtime.executor import RunError, run_function
    from .compile import read_source
    results = (f"result '{bad[0]}' is" if len(bad) == 1 else
               f"results {', '.join(repr(b) for b in bad)} are") + " not finite"
    try:
        run_function(module, run_name, inputs, dims=dims, executor=AnomalyExecutor)
    except RunError as e:
        w = AdcError(f"{results}: {e}", e.loc)
        print(render(w, read_source(e.loc.file) if e.loc else None, "warning"),
              file=sys.stderr)
        return
    print(f"warning: {results}", file=sys.stderr)
