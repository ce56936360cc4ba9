"""Benchmark: the frontier agents' train steps (QR-DQN, TQC, CrossQ) against the arithmetic of a gradient step.

    python benchmarks/step_arithmetic.py --suite=qrdqn-cartpole
    python benchmarks/step_arithmetic.py --suite=tqc-pendulum
    python benchmarks/step_arithmetic.py --suite=crossq-pendulum

The step: benchmarks/compare.py's in-graph floor of the suite (its preset's settings, K gradient steps per
`tf.function` call on random batches, XLA and precision as the run resolves them, one thread). The arithmetic:
one gradient step's work timed alone in NumPy (its BLAS) on one thread, with no framework around it, as
docs/notes/2026-12-04-reference-measurements.md does for DQN:

- every Dense layer's matrix products: the forward passes the step makes (with their rows), and for the
  networks it trains the backward pass (the input's gradient and the kernel's: two products per layer; through
  the critics to the action in the actor's loss, the input's alone);
- the loss's pairwise terms where they dominate the elementwise work: QR-DQN's and TQC's quantile Huber loss over
  [B, N, M] pairs, forward and gradient; CrossQ's batch renormalization of each layer's pre-activations,
  forward and gradient;
- Adam's update of every trained parameter (the actor's and the temperature's every policy_delay steps).

Activations and the rest of the elementwise work are left out. The products and Adam are a floor; the loss's
pairwise terms and the renormalizations, timed in NumPy, materialize every intermediate array that XLA fuses away,
so where they dominate (many quantiles) that part is no floor: both parts are printed. Run it alone
(OMP_NUM_THREADS=1 is set here): anything else on the machine skews both numbers.
"""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # NumPy's BLAS on one thread, as the step's TF threads

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

BENCHMARKS_DIR = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS_DIR))
import compare  # noqa: E402

FLAGS = flags.FLAGS


def _median_s(fn, repeats: int = 30) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _matmuls_s(rows: int, sizes: list[int], passes: float, backward: float, input_grads: float) -> float:
    """Seconds of `passes` forward passes of a Dense chain `sizes` on `rows` rows, `backward` full backward passes
    (two products a layer) and `input_grads` backward passes to the input alone (one product a layer)."""
    rng = np.random.default_rng(0)
    total = 0.0
    for m, n in zip(sizes[:-1], sizes[1:]):
        x = rng.normal(size=(rows, m)).astype(np.float32)
        w = rng.normal(size=(m, n)).astype(np.float32)
        g = rng.normal(size=(rows, n)).astype(np.float32)
        forward = _median_s(lambda: x @ w)
        to_input = _median_s(lambda: g @ w.T)
        to_kernel = _median_s(lambda: x.T @ g)
        total += passes * forward + backward * (to_input + to_kernel) + input_grads * to_input
    return total


def _adam_s(parameters: float) -> float:
    """One Adam update of `parameters` floats: the moments, their corrections, the step (about 10 passes)."""
    size = int(parameters)
    p, g, m, v = (np.random.default_rng(i).normal(size=size).astype(np.float32) for i in range(4))
    np.abs(v, out=v)  # a second moment is not negative

    def update():
        np.multiply(m, 0.9, out=m)
        np.add(m, 0.1 * g, out=m)
        np.multiply(v, 0.999, out=v)
        np.add(v, 0.001 * g * g, out=v)
        np.subtract(p, 1e-3 * m / (np.sqrt(v) + 1e-8), out=p)

    return _median_s(update)


def _quantile_huber_s(batch: int, n: int, m: int, copies: int) -> float:
    """`copies` quantile Huber losses of N predicted against M target quantiles per row, forward and gradient."""
    rng = np.random.default_rng(0)
    z, t = rng.normal(size=(batch, n)).astype(np.float32), rng.normal(size=(batch, m)).astype(np.float32)
    tau = ((2 * np.arange(n) + 1) / (2 * n)).astype(np.float32)[None, :, None]

    def loss_and_gradient():
        u = t[:, None, :] - z[:, :, None]  # [B, N, M]
        absolute = np.abs(u)
        huber = np.where(absolute <= 1.0, 0.5 * u * u, absolute - 0.5)
        weight = np.abs(tau - (u < 0))
        loss = np.mean(weight * huber)
        gradient = -(weight * np.clip(u, -1.0, 1.0)).sum(axis=-1)
        return loss, gradient

    return copies * _median_s(loss_and_gradient)


def _batch_norm_s(rows: int, units: list[int], copies: float) -> float:
    """`copies` batch renormalizations of [rows, u] for each u in units, forward and gradient."""
    total = 0.0
    for u in units:
        x = np.random.default_rng(u).normal(size=(rows, u)).astype(np.float32)
        g = np.ones_like(x)

        def forward_and_gradient():
            mean, var = x.mean(0), x.var(0)
            x_hat = (x - mean) / np.sqrt(var + 1e-3)
            y = 1.5 * x_hat + 0.1
            dx_hat = g * 1.5
            dx = (dx_hat - dx_hat.mean(0) - x_hat * (dx_hat * x_hat).mean(0)) / np.sqrt(var + 1e-3)
            return y, dx

        total += copies * _median_s(forward_and_gradient)
    return total


def _params(sizes: list[int]) -> int:
    return sum(m * n + n for m, n in zip(sizes[:-1], sizes[1:]))


def qrdqn_arithmetic_s(config, info) -> tuple[float, float]:
    """Online network on s (trained) and the target on s' (and the online on s' with double_dqn), the loss over
    [B, N, N], Adam."""
    b, n = config.batch_size, config.num_quantiles
    sizes = [int(np.prod(info.obs_shape)), *config.hidden_sizes, info.num_actions * n]
    passes = 2 + (1 if config.double_dqn else 0)
    products = _matmuls_s(b, sizes, passes, backward=1, input_grads=0) + _adam_s(_params(sizes))
    return products, _quantile_huber_s(b, n, n, 1)


def tqc_arithmetic_s(config, info) -> tuple[float, float]:
    """C critics on (s, a) (trained) and their targets on (s', a'); the actor on s' and on s (trained, every step);
    the critics again on (s, pi(s)) with the gradient to the action; the loss of each critic's N against the
    C (N - d) kept target quantiles; Adam on the critics and the actor."""
    b, c, n = config.batch_size, config.num_critics, config.num_quantiles
    obs, act = int(np.prod(info.obs_shape)), info.action_size
    critic = [obs + act, *config.hidden_sizes, n]
    actor = [obs, *config.hidden_sizes, 2 * act]
    kept = c * (n - config.top_quantiles_to_drop_per_net)
    products = (_matmuls_s(b, critic, passes=3 * c, backward=c, input_grads=c)
                + _matmuls_s(b, actor, passes=2, backward=1, input_grads=0))
    return products + _adam_s(c * _params(critic) + _params(actor)), _quantile_huber_s(b, n, kept, c)


def crossq_arithmetic_s(config, info) -> tuple[float, float]:
    """The critics on [s; s'] and [a; a'] in one pass of 2B rows (trained), the actor on s'; every policy_delay
    steps the actor on s (trained) and the critics on (s, pi(s)) with the gradient to the action; the batch
    renormalizations of the passes in training mode (the critics' joint pass, the actor's on s; a pass in
    evaluation mode is an affine map, left out); Adam on the critics, and on the actor every policy_delay steps."""
    b, delay = config.batch_size, config.policy_delay
    obs, act = int(np.prod(info.obs_shape)), info.action_size
    critic = [obs + act, *config.critic_hidden_sizes, 1]
    actor = [obs, *config.hidden_sizes, 2 * act]
    critic_norms = [obs + act, *config.critic_hidden_sizes]
    actor_norms = [obs, *config.hidden_sizes] if config.actor_batch_norm else []
    products = (_matmuls_s(2 * b, critic, passes=2, backward=2, input_grads=0)
                + _matmuls_s(b, critic, passes=2 / delay, backward=0, input_grads=2 / delay)
                + _matmuls_s(b, actor, passes=1 + 1 / delay, backward=1 / delay, input_grads=0))
    norms = _batch_norm_s(2 * b, critic_norms, copies=2) + _batch_norm_s(b, actor_norms, copies=1 / delay)
    return products + _adam_s(2 * _params(critic) + _params(actor) / delay), norms


ARITHMETIC = {"qrdqn": qrdqn_arithmetic_s, "tqc": tqc_arithmetic_s, "crossq": crossq_arithmetic_s}


def main(argv) -> None:
    del argv
    spec = compare.run_specs(FLAGS.suite, [0], threads=1, quick=False)[0]
    if spec.agent not in ARITHMETIC:
        raise app.UsageError(f"--suite={FLAGS.suite}: its agent {spec.agent!r} has no arithmetic here; choose a "
                             f"suite of {', '.join(ARITHMETIC)}")
    step = compare.measure_floor(spec, FLAGS.calls, FLAGS.repeats)
    config = compare.config_lib.apply_overrides(compare.config_class(spec.agent)(), spec.hparams, "spec")
    products_s, elementwise_s = ARITHMETIC[spec.agent](config, compare._env_info(spec.env_id))
    arithmetic_ms, products_ms = (products_s + elementwise_s) * 1e3, products_s * 1e3
    print(json.dumps({"suite": FLAGS.suite, "cpu": compare.cpu_model(), "xla": step["xla"],
                      "steps_per_call": step["steps_per_call"], "step_ms": round(step["ms_per_step"], 3),
                      "products_and_adam_ms": round(products_ms, 3),
                      "loss_or_norm_terms_ms": round(elementwise_s * 1e3, 3),
                      "arithmetic_ms": round(arithmetic_ms, 3),
                      "step_over_arithmetic": round(step["ms_per_step"] / arithmetic_ms, 2),
                      "step_over_products_and_adam": round(step["ms_per_step"] / products_ms, 2)}))


if __name__ == "__main__":
    flags.DEFINE_string("suite", None, "A suite of benchmarks/compare.py whose agent is qrdqn, tqc or crossq.")
    flags.DEFINE_integer("calls", 100, "Timed train calls per repeat.")
    flags.DEFINE_integer("repeats", 3, "Repeats of the timed calls (the median is kept).")
    flags.mark_flag_as_required("suite")
    app.run(main)
