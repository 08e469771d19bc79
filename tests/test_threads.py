"""The BLAS thread count: read, limited for a block or the process, and `adc run --threads`."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc
from adc_runtime import threads

ROOT = Path(__file__).resolve().parent.parent

needs_blas = pytest.mark.skipif(not threads.blas_info(), reason="no BLAS library found")


@needs_blas
def test_a_block_limits_blas_threads_and_restores_them():
    before = adc.blas_thread_count()
    with adc.blas_threads(1):
        assert adc.blas_thread_count() == 1
        a = np.ones((64, 64))
        assert np.array_equal(a @ a, np.full((64, 64), 64.0))
    assert adc.blas_thread_count() == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_thread_count_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="positive integer"):
        adc.set_blas_threads(bad)
    with pytest.raises(ValueError, match="positive integer"):
        with adc.blas_threads(bad):
            pass


@needs_blas
def test_run_threads_option_limits_blas_in_that_run():
    code = ("import sys; from adcompiler import cli; from adc_runtime import threads\n"
            "status = cli.main(['run', 'samples/mlp.tdsl', '--inputs', 'samples/mlp.json',"
            " '--threads', '1'])\n"
            "print('threads', threads.blas_thread_count(), 'status', status)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("threads 1 status 0")


@pytest.mark.parametrize("bad", ["0", "-2", "two"])
def test_run_threads_option_rejects_non_positive_counts(bad):
    done = subprocess.run([sys.executable, "-m", "adcompiler", "run", "samples/mlp.tdsl",
                           "--threads", bad], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "positive number of threads" in done.stderr
