"""The library layer, as JAX users know it: load and run programs (`program`), the
differentiating transforms (`transforms`: grad, jvp, vjp, hvp, value_and_grad; `derivatives`:
jacfwd, jacrev, hessian, check_grads; `vectorize`: vmap), compiled callables (`compiled`,
`derive`, `wrt`), Jacobians (`jacobian`) and saved compiled artifacts (`artifact`).

The public names are re-exported lazily by the `adcompiler` package itself.
"""
