"""Python functions adc refuses, each at a known place: the line marked ``# ERR`` and the
column of the text after ``# at:`` on that line."""
import numpy as np

CONFIG = object()
TABLE = np.ones(3)


def while_runtime(x):
    while np.sum(x) > 0:  # ERR at: np.sum(x) > 0
        x = x - 1.0
    return np.sum(x)


def try_block(x):
    try:  # ERR at: try
        y = np.log(x)
    except ValueError:
        y = x
    return np.sum(y)


def item_assignment(x):
    x[0] = 1.0  # ERR at: x[0]
    return np.sum(x)


def item_augassign(x):
    x[1:] += 1.0  # ERR at: x[1:]
    return np.sum(x)


def unknown_function(x):
    return np.sum(np.linalg.inv(x))  # ERR at: np.linalg.inv


def python_object(x):
    return np.sum(x) * CONFIG  # ERR at: CONFIG


def global_array(x):
    return np.sum(x * TABLE)  # ERR at: TABLE


def if_runtime(x):
    if np.sum(x) > 0:  # ERR at: np.sum(x) > 0
        return np.sum(x)
    return -np.sum(x)


def return_in_loop(x):
    for i in range(3):
        return x[i]  # ERR at: return
    return np.sum(x)


def list_by_loop_index(x, ws):
    acc = 0.0
    for i in range(2):
        acc = acc + np.sum(x * ws[i])  # ERR at: i]
    return acc


def matmul_shapes(x):
    return np.sum(x @ x)  # ERR at: @


def einsum_trace(x):
    return np.einsum("ii->", x)  # ERR at: einsum


def nested_def(x):
    def inner(y):  # ERR at: def inner
        return y
    return np.sum(inner(x))
