"""Write scikit-learn's bundled digits (1,797 8x8 images, shipped inside the package: nothing
is downloaded) as the data files of `adc train samples/digits_mlp.tdsl`.

    python samples/digits_data.py [OUT_DIR]     # digits_train.npz, digits_test.npz

Pixels are scaled from 0..16 to [0, 1]; 20% of the images, drawn with seed 0 and stratified
by class, are held out as the test set. Keys are the loss's data inputs: ``x`` (f32[N, 64])
and ``labels`` (i64[N]).
"""
import os
import sys

import numpy as np


def main(out: str = ".") -> None:
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        sys.exit("digits_data.py needs scikit-learn: pip install -e '.[samples]'")
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=0,
                                              stratify=y)
    for name, xs, ys in (("digits_train.npz", x_tr, y_tr), ("digits_test.npz", x_te, y_te)):
        np.savez(os.path.join(out, name), x=xs, labels=ys)
        print(f"{os.path.join(out, name)}: {len(ys)} images")


if __name__ == "__main__":
    main(*sys.argv[1:2])
