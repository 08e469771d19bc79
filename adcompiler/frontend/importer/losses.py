"""The losses an import adds (`--loss`, ``loss=``), by name: the TDSL expression of each over
the model's output `out` and the input `target`. Kept apart from the writer so that the
command line lists them without loading the front end."""

LOSSES = {"cross_entropy": "mean(cross_entropy(out, target))", "mse": "mse(out, target)"}
