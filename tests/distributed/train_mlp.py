"""Run by mpiexec from test_distributed.py: 20 data-parallel training steps of an MLP in
float64; rank 0 writes the parameters and the losses to argv[1].

argv[2] (optional): ``fail:R:S`` makes rank R raise at step S (before any all-reduce
when S is 0), ``fail:all:0`` every rank at step 0; ``nobucket`` uses a bucket
of one gradient each; ``blocking`` puts every all-reduce after the backward pass."""
import sys

import numpy as np

import adcompiler as adc
from adcompiler.training.distributed import communicator, fail_together, shard

MODEL = """
def mlp(x: f64[B, 5], y: i64[B], param W1: f64[5, 7], param b1: f64[7],
        param W2: f64[7, 3], param b2: f64[3]) -> f64 {
    h = tanh(x @ W1 + b1)
    return mean(cross_entropy(h @ W2 + b2, y))
}
"""


def main(out: str, mode: str = "") -> None:
    comm = communicator("mpi")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5))
    y = np.argmax(x @ rng.normal(size=(5, 3)), axis=1)   # labels a model can learn
    params = {"W1": rng.normal(size=(5, 7)) * 0.5, "b1": np.zeros(7),
              "W2": rng.normal(size=(7, 3)) * 0.5, "b2": np.zeros(3)}
    step = adc.train_step(MODEL, adc.optim.adam(0.05), clip=1.0, comm=comm,
                          bucket_mb=1e-5 if mode == "nobucket" else 25.0,
                          overlap=mode != "blocking")
    state = step.init(params)
    order = np.random.default_rng(1)
    losses = []
    with fail_together(comm):
        for k in range(20):
            if mode.startswith("fail:") and mode.split(":")[1] in (str(comm.rank), "all") \
                    and k == int(mode.split(":")[2]):
                raise RuntimeError("a failure made on purpose")
            rows = shard(order.permutation(60)[:12], comm.rank, comm.size)
            params, state, metrics = step(params, state, {"x": x[rows], "y": y[rows]})
            losses.append(float(metrics["loss"]))
    if comm.rank == 0:
        np.savez(out, losses=np.array(losses), **params)


if __name__ == "__main__":
    try:
        main(*sys.argv[1:])
    except RuntimeError as e:   # reported as the command line reports a user's mistake
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
