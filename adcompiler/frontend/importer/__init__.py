"""What the model importers share: the TDSL writer (`writer`), names and literals
(`names`), the losses an import may add (`losses`), and what an import returns (`imported`)."""
