"""The op registry and the kernel table agree: every op can be run and differentiated."""
from adcompiler.ops import REGISTRY
from adc_runtime import KERNELS

STRUCTURAL = {"call", "for", "yield", "return"}


def test_every_op_has_a_kernel():
    missing = sorted(set(REGISTRY) - set(KERNELS))
    assert not missing, f"ops without a kernel: {missing}"


def test_every_kernel_belongs_to_an_op():
    orphans = sorted(set(KERNELS) - set(REGISTRY) - STRUCTURAL)
    assert not orphans, f"kernels without an op: {orphans}"


def test_every_differentiable_op_has_a_vjp_rule():
    lacking = sorted(name for name, d in REGISTRY.items()
                     if d.vjp is None and not (d.has("no_grad") or d.has("constructor")))
    assert not lacking, f"ops without a VJP rule: {lacking}"


def test_spec_ops_are_all_registered():
    spec = """neg exp log log1p expm1 sqrt rsqrt abs sign sin cos tanh sigmoid relu gelu
    softplus square reciprocal leaky_relu clip round floor ceil add sub mul div pow maximum
    minimum where lt le gt ge eq ne sum mean max min logsumexp var matmul transpose einsum
    reshape broadcast_to expand_dims squeeze concat stack index softmax log_softmax
    cross_entropy bce bce_with_logits mse layernorm take one_hot zeros ones full zeros_like
    ones_like arange cast stop_gradient const""".split()
    missing = sorted(set(spec) - set(REGISTRY))
    assert not missing, f"spec ops not registered: {missing}"
