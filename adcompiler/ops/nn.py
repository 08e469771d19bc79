"""Neural-net ops: softmax, log_softmax, cross_entropy, bce, bce_with_logits, mse, layernorm,
take, one_hot; plus stop_gradient and cast."""
from __future__ import annotations
