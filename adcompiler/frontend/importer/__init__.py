"""What the model importers share: the TDSL writer (`writer`), names and literals
(`names`), and what an import returns (`imported`)."""
