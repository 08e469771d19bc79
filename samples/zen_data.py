"""Write the Zen of Python (the text of the standard library's `this` module, 856 characters,
32 distinct once lower-cased) as training rows of `samples/char_rnn.tdsl`:

    python samples/zen_data.py [OUT.npz]        # default zen.npz

Each row is a window of 32 character indices (``xs``) and the same window shifted by one
character (``ys``, the characters to predict); windows start every 4 characters.
"""
import codecs
import contextlib
import io
import sys

import numpy as np

WINDOW, STRIDE = 32, 4


def zen_text() -> str:
    with contextlib.redirect_stdout(io.StringIO()):  # importing `this` prints the text
        import this
    return codecs.decode(this.s, "rot13").lower()


def main(out: str = "zen.npz") -> None:
    text = zen_text()
    alphabet = sorted(set(text))
    assert len(alphabet) <= 32, "char_rnn.tdsl has an alphabet of 32 symbols"
    idx = np.array([alphabet.index(c) for c in text], dtype=np.int64)
    starts = range(0, len(idx) - WINDOW - 1, STRIDE)
    xs = np.stack([idx[s:s + WINDOW] for s in starts])
    ys = np.stack([idx[s + 1:s + WINDOW + 1] for s in starts])
    np.savez(out, xs=xs, ys=ys)
    print(f"{out}: {len(xs)} windows of {WINDOW} characters, alphabet of {len(alphabet)}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
