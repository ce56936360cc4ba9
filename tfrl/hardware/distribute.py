"""Distribution strategies: which one a run uses, the cluster it belongs to, and the replicated gradient step.

    --strategy=default       no tf.distribute strategy: variables and the step on --device (the fast path)
    --strategy=one_device    tf.distribute.OneDeviceStrategy on --device (the replicated code path on one device)
    --strategy=mirrored      one learner replicated over the visible GPUs, or the logical CPUs if there is no GPU
    --strategy=multi_worker  tf.distribute.MultiWorkerMirroredStrategy over the processes listed in TF_CONFIG

tfrl.hardware.runtime creates the strategy once, in `apply()`, before any TF op (MultiWorkerMirroredStrategy
configures the collective ops of the TF context, which is only possible before it initializes).

The batch a worker trains on (DQN: `batch_size` transitions sampled from its own replay; A2C: its own
rollout of `num_envs * n_steps` steps) is split evenly across that worker's replicas. Each replica
computes the gradients of the mean loss over its shard; the step applies the mean of those gradients
over all replicas of all workers. With equal shards that is the gradient of the mean loss over every
worker's batch, so `global_clipnorm` clips the same gradient one device would see.

The optimizer is applied in cross-replica context, to gradients already reduced here, rather than in
replica context where Keras would all-reduce them itself: Keras clips each replica's gradients before
its all-reduce, which is not the clipping of the mean gradient. It also lets `--xla` compile the
per-replica forward/backward pass alone: `jit_compile` around a step that applies gradients to mirrored
variables fails ("Trying to access resource ... located in device CPU:1 from device CPU:0").
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
from typing import Any, Callable

import numpy as np

from tfrl import errors
from tfrl.lazy_import import LazyModule

tf = LazyModule("tensorflow")  # imported at first use: tfrl.hardware.runtime imports this module before flags are checked

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker")
# --cross_device_ops (mirrored only): how gradients are all-reduced between the devices of one machine.
CROSS_DEVICE_OPS = ("auto", "nccl", "hierarchical_copy", "reduce_to_one")
# --collective (multi_worker only): how gradients are all-reduced between workers.
COLLECTIVES = ("auto", "ring", "nccl")
_SUPPORTED_TASK_TYPES = ("chief", "worker")


class DistributeConfigError(errors.UsageError):
    """A strategy flag, a flag combination or TF_CONFIG is invalid."""


@dataclasses.dataclass(frozen=True)
class ClusterTask:
    """This process's place in a multi-worker cluster, from TF_CONFIG.

    Attributes:
      num_workers: processes that train (the chief, if the cluster names one, and every worker).
      rank: 0 for the chief, 1..num_workers-1 for the others; used to give each worker its own env seeds.
      task: TF_CONFIG's task, e.g. "worker:1".
    """

    num_workers: int
    rank: int
    task: str

    @property
    def is_chief(self) -> bool:
        """Only the chief writes checkpoints, metrics, TensorBoard and the export."""
        return self.rank == 0


SINGLE_PROCESS = ClusterTask(num_workers=1, rank=0, task="local")


def parse_tf_config(text: str | None) -> ClusterTask:
    """TF_CONFIG's JSON -> ClusterTask; DistributeConfigError naming what is wrong.

    The chief is the task of type "chief" if the cluster has one, else worker 0 (TF's rule).
    """
    if not text or not text.strip():
        raise DistributeConfigError(
            "--strategy=multi_worker needs the TF_CONFIG environment variable, e.g. "
            '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, "task": {"type": "worker", "index": 0}} '
            "(see docs/distributed.md)")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise DistributeConfigError(f"TF_CONFIG is not valid JSON ({e})") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict) \
            or not isinstance(config.get("task"), dict):
        raise DistributeConfigError('TF_CONFIG needs a "cluster" object and a "task" object')
    cluster, task = config["cluster"], config["task"]
    for task_type, addresses in cluster.items():
        if task_type not in _SUPPORTED_TASK_TYPES:
            raise DistributeConfigError(f"TF_CONFIG: cluster job {task_type!r} is not supported by "
                                        f"MultiWorkerMirroredStrategy here; use {' and '.join(_SUPPORTED_TASK_TYPES)}")
        if not isinstance(addresses, list) or not addresses or not all(
                isinstance(a, str) and a.rpartition(":")[2].isdigit() and a.rpartition(":")[0] for a in addresses):
            raise DistributeConfigError(f"TF_CONFIG: cluster job {task_type!r} must be a non-empty list of "
                                        f"\"host:port\" strings, got {addresses!r}")
    if len(cluster.get("chief", [])) > 1:
        raise DistributeConfigError("TF_CONFIG: a cluster has at most one chief")
    if "worker" not in cluster and "chief" not in cluster:
        raise DistributeConfigError('TF_CONFIG: the cluster lists no "worker" (nor "chief") addresses')
    task_type, index = task.get("type"), task.get("index")
    if task_type not in cluster:
        raise DistributeConfigError(f"TF_CONFIG: task type {task_type!r} is not a job of the cluster "
                                    f"({', '.join(cluster)})")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(cluster[task_type]):
        raise DistributeConfigError(f"TF_CONFIG: task index {index!r} is out of range for the "
                                    f"{len(cluster[task_type])} {task_type!r} address(es)")
    has_chief = "chief" in cluster
    rank = 0 if task_type == "chief" else index + int(has_chief)
    return ClusterTask(num_workers=len(cluster.get("chief", [])) + len(cluster.get("worker", [])), rank=rank,
                       task=f"{task_type}:{index}")


def validate(strategy: str, device: str, cross_device_ops: str, collective: str,
             tf_config: str | None) -> ClusterTask:
    """Checks that need no TF device initialization; returns this process's cluster task."""
    if strategy not in STRATEGIES:
        raise DistributeConfigError(f"--strategy: unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if cross_device_ops not in CROSS_DEVICE_OPS:
        raise DistributeConfigError(f"--cross_device_ops: unknown value {cross_device_ops!r}; "
                                    f"choose one of {', '.join(CROSS_DEVICE_OPS)}")
    if collective not in COLLECTIVES:
        raise DistributeConfigError(f"--collective: unknown value {collective!r}; choose one of {', '.join(COLLECTIVES)}")
    if cross_device_ops != "auto" and strategy != "mirrored":
        raise DistributeConfigError(f"--cross_device_ops={cross_device_ops} applies to --strategy=mirrored only "
                                    f"(got --strategy={strategy}); multi_worker takes --collective")
    if collective != "auto" and strategy != "multi_worker":
        raise DistributeConfigError(f"--collective={collective} applies to --strategy=multi_worker only "
                                    f"(got --strategy={strategy})")
    if strategy in ("mirrored", "multi_worker") and device != "auto":
        raise DistributeConfigError(
            f"--device={device} cannot be combined with --strategy={strategy}, which uses every visible GPU "
            "(or the logical CPUs if there is none); choose them with --visible_gpus or --logical_cpus")
    if strategy == "multi_worker":
        return parse_tf_config(tf_config)
    return SINGLE_PROCESS


def multi_worker_strategy(collective: str, visible_gpus: list) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy from TF_CONFIG; call before any TF op (it configures the TF context)."""
    if collective == "nccl" and not visible_gpus:
        raise DistributeConfigError("--collective=nccl needs GPUs, and none is visible; use --collective=ring "
                                    "(or auto) on CPU workers")
    implementation = {
        "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
    }[collective]
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation))


def local_strategy(strategy: str, device_name: str, cross_device_ops: str) -> tf.distribute.Strategy | None:
    """The one-machine strategies (None for "default"); TF's devices must already be configured."""
    if strategy == "default":
        return None
    if strategy == "one_device":
        return tf.distribute.OneDeviceStrategy(device_name)
    gpus = tf.config.list_logical_devices("GPU")
    devices = gpus or tf.config.list_logical_devices("CPU")
    names = ", ".join(d.name.split("device:", 1)[-1] for d in devices)
    if len(devices) < 2:
        raise DistributeConfigError(
            f"--strategy=mirrored needs at least 2 devices, but only {names} is visible; on a CPU-only machine "
            "split the CPU with --logical_cpus=2, or use --strategy=default")
    if cross_device_ops == "nccl" and not gpus:
        # TF has no CPU kernel for NcclAllReduce; the op would fail at the first step.
        raise DistributeConfigError(f"--cross_device_ops=nccl all-reduces between GPUs, and none is visible "
                                    f"({names}); use reduce_to_one, hierarchical_copy or auto on CPUs")
    reduce_ops = {
        "auto": None,  # TF's choice: NCCL between GPUs where it can, else reduction to one device
        # On a ROCm build of TensorFlow, NcclAllReduce runs on RCCL, AMD's implementation of the NCCL API.
        "nccl": tf.distribute.NcclAllReduce,
        "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
        "reduce_to_one": tf.distribute.ReductionToOneDevice,
    }[cross_device_ops]
    return tf.distribute.MirroredStrategy([d.name for d in devices],
                                          cross_device_ops=reduce_ops() if reduce_ops else None)


def describe(strategy: tf.distribute.Strategy | None, cluster: ClusterTask) -> str:
    """One line for the start-up banner."""
    if strategy is None:
        return "default (no tf.distribute strategy)"
    devices = ", ".join(d.split("device:", 1)[-1] for d in strategy.extended.worker_devices)
    text = f"{type(strategy).__name__}, {strategy.num_replicas_in_sync} replica(s) in sync, local devices: {devices}"
    cross_device_ops = getattr(strategy.extended, "_cross_device_ops", None)
    if isinstance(strategy, tf.distribute.MirroredStrategy) and cross_device_ops is not None:
        text += f", cross-device ops: {type(cross_device_ops).__name__}"
    if cluster.num_workers > 1 or cluster.task != SINGLE_PROCESS.task:
        text += f"; task {cluster.task} of {cluster.num_workers} worker(s), {'chief' if cluster.is_chief else 'not chief'}"
    return text


# ---- inside the train step's tf.function --------------------------------------

def local_shard(batch: tf.Tensor, local_replicas: int) -> tf.Tensor:
    """In replica context: this replica's rows [B / local_replicas, ...] of its worker's batch [B, ...]."""
    context = tf.distribute.get_replica_context()
    # Replica ids run worker by worker (task * local_replicas + local index), so the remainder is the local index.
    index = context.replica_id_in_sync_group % local_replicas
    size = tf.shape(batch)[0] // local_replicas
    return batch[index * size:(index + 1) * size]


def replica_mean(strategy: tf.distribute.Strategy, local_replicas: int, replica_fn: Callable[..., Any],
                 *batch: tf.Tensor) -> Any:
    """Runs replica_fn(*shards) on every replica, each on its shard of each batch tensor; returns the mean,
    over all replicas of all workers, of each tensor replica_fn returns (a nest of tensors)."""
    def on_replica(*worker_batch):
        outputs = replica_fn(*(tf.nest.map_structure(lambda tensor: local_shard(tensor, local_replicas), value)
                               for value in worker_batch))  # a value may be a dict (Dict observations)
        # One batched all-reduce of the whole nest (TF packs the tensors), not one collective per tensor.
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, outputs)

    per_replica = strategy.run(on_replica, args=batch)
    # Every replica now holds the same values: take this worker's first copy.
    return tf.nest.map_structure(lambda value: strategy.experimental_local_results(value)[0], per_replica)


def check_batch_split(batch_name: str, batch_size: int, local_replicas: int) -> None:
    """A worker's batch must split evenly over its replicas (unequal shards would weigh rows unequally)."""
    if batch_size % local_replicas:
        raise DistributeConfigError(
            f"{batch_name} = {batch_size} does not split evenly over this worker's {local_replicas} replicas; "
            f"make it a multiple of {local_replicas}")


# ---- checking that workers agree ----------------------------------------------

def checkpoint_digest(prefix: str | pathlib.Path) -> str:
    """SHA-256 over every tensor of a TF checkpoint (networks, optimizer slots, counters), in name order.

    Workers that stayed in sync hold bit-identical variables, so their final checkpoints have the same digest.
    """
    reader = tf.train.load_checkpoint(str(prefix))
    digest = hashlib.sha256()
    for name in sorted(reader.get_variable_to_shape_map()):
        if name == "_CHECKPOINTABLE_OBJECT_GRAPH":  # the object graph, not a variable
            continue
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(reader.get_tensor(name)).tobytes())
    return digest.hexdigest()
