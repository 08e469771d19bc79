"""Training: the compiled step (`step`), the loop (`loop`, with `setup`, `data` and `report`),
optimizers and schedules (`optim`), checkpoints (`checkpoint`), mixed precision
(`mixed_precision`, `loss_scale`) and data-parallel training (`distributed`).

The public names are re-exported lazily by the `adcompiler` package itself.
"""
