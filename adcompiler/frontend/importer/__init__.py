"""What the model importers share: the TDSL writer (`writer`), names and literals
(`names`), parameter groups mirroring a model's module tree (`groups`), the losses an import
may add (`losses`), and what an import returns (`imported`)."""
