"""The ``adc`` command line: one module per command or concern (inputs, compilation,
tables, checks, output); ``app`` builds the parser and dispatches."""
from .app import build_parser, main

__all__ = ["build_parser", "main"]
