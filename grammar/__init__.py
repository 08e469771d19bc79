"""The grammars of TDSL and of the textual IR (package data)."""
