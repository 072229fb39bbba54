"""quad_numpy.py: the quadratic test trainer (worker/trainers/quadratic.c, model/quadratic.c) in numpy float32,
op for op: the initial global parameters, each worker's problem, and one AdamW step. Shared by
quad_worker.py (a PyTorch worker) and topk_reference.py (the reference of a --compress topk run); numpy
only, so that a reference does not pay torch's import."""
import ctypes
import math

import numpy as np

GOLDEN = 0x9E3779B97F4A7C15


def xxh3(data):
    f = ctypes.CDLL("libxxhash.so.0").XXH3_64bits
    f.restype = ctypes.c_uint64
    f.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return f(data, len(data))


def splitmix_uniform(state, count):
    """count draws of common/base/util.c rng_uniform from state (vectorised: the k-th state is state + k*G)."""
    with np.errstate(over="ignore"):
        k = np.arange(1, count + 1, dtype=np.uint64)
        z = np.uint64(state) + k * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def problem_numpy(seed, worker_id, numel):
    """The worker's (a, c): a ~ U[0.5, 1.5), c ~ U[-1, 1), from the run's seed and the XXH3 of its id."""
    u = splitmix_uniform(seed ^ xxh3(worker_id.encode()), 2 * numel)
    return (np.float32(0.5) + u[0::2]).astype(np.float32), (np.float32(2.0) * u[1::2] - np.float32(1.0)).astype(np.float32)


def initial_params(seed, numel):
    """coordinator init's version 0 of a quadratic run: U(-1, 1) from the seed."""
    return (np.float32(2.0) * splitmix_uniform(seed ^ GOLDEN, numel) - np.float32(1.0)).astype(np.float32)


def adamw_constants(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8):
    f = np.float32
    return dict(lr=f(lr), b1=f(beta1), b2=f(beta2), eps=f(eps), one_b1=f(1) - f(beta1), one_b2=f(1) - f(beta2))


def bias_corrections(k, step):
    return (np.float32(1.0 - math.pow(float(k["b1"]), step)), np.float32(1.0 - math.pow(float(k["b2"]), step)))


def adamw_step_numpy(x, g, m, v, bc1, bc2, k):
    """One AdamW step in place on x, m, v; np.float32 scalars keep every op in fp32 (numpy 1 and 2 alike)."""
    np.multiply(m, k["b1"], out=m)
    np.add(m, g * k["one_b1"], out=m)
    np.multiply(v, k["b2"], out=v)
    np.add(v, (g * k["one_b2"]) * g, out=v)
    upd = (m / bc1) * k["lr"]
    np.subtract(x, upd / (np.sqrt(v / bc2) + k["eps"]), out=x)
