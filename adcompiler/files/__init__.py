"""The user's files: data read without trusting it (`read`: ``.npz`` and ``.json``), inputs
checked against a function's signature and dims bound from them (`inputs`), and output files
written atomically or through (`write`)."""
