"""The Stable-Baselines3 side of benchmarks/compare.py: train SB3 with a tfrl config's hyperparameters.

    python benchmarks/sb3_runner.py --spec=RUN/spec.json --run_dir=RUN/run

compare.py writes the spec (agent, env id, seed, threads, and the resolved tfrl hyperparameters of the
suite's preset); this script translates the hyperparameters to SB3's arguments, trains, evaluates the
greedy policy with tfrl.run.evaluation (the same episodes and env seeds as tfrl's final evaluation), and
writes run_dir/metrics.jsonl in tfrl's shape: a "train" record every log_interval env steps (mean
return of the training episodes that ended since the last one) and one "final_eval" record.

An env with an action_masks() method (tfrl/MaskedPick-v0) trains sb3-contrib's MaskablePPO instead of PPO, on the
observation without its action_mask entry (tfrl's networks never read the mask either), and its greedy
evaluation passes each state's mask. PPO with lstm_units trains sb3-contrib's RecurrentPPO (its LSTM of lstm_units
reads the observation and hidden_sizes' layers follow it, where tfrl's follows a torso of hidden_sizes); its
greedy evaluation carries each episode's LSTM state and starts it afresh where tfrl.run.evaluation resets it. A2C's and
PPO's normalize_observations and normalize_rewards are SB3's VecNormalize (frozen statistics at evaluation).

A hyperparameter SB3 cannot express (double DQN, n-step returns, ...) is an error, not a silent
mismatch. Needs the bench extra: pip install 'tfrl[bench]'.

--library=sbx trains SBX (Stable-Baselines-Jax: SB3's algorithms compiled with JAX) on the same translation
(sbx_kwargs says where it differs), for DQN, PPO, SAC, TD3, TQC and CrossQ; extra bench-jax. QR-DQN, TQC and CrossQ
train sb3-contrib's QRDQN, TQC and CrossQ.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

from absl import flags

from tfrl import cli, errors
from tfrl.errors import UsageError
from tfrl.run import evaluation

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Only when run as a script, so that tests can import the translations without defining flags."""
    flags.DEFINE_string("spec", None, "JSON spec written by benchmarks/compare.py.")
    flags.DEFINE_string("run_dir", None, "Where metrics.jsonl goes.")
    flags.DEFINE_enum("library", "sb3", ["sb3", "sbx"], "Stable-Baselines3 (PyTorch) or SBX (JAX).")


def dqn_kwargs(hp: dict, library: str = "SB3's DQN") -> dict:
    """SB3 DQN arguments for tfrl DQNConfig fields; UsageError for settings SB3's DQN does not have."""
    unsupported = {"double_dqn": True, "dueling": True}
    for key, value in unsupported.items():
        if hp.get(key) == value:
            raise UsageError(f"{library} has no {key}; compare with a preset that sets {key}=false")
    if hp["n_step_return"] != 1 or hp["num_envs"] != 1:
        # SB3 counts train_freq in vector steps, tfrl in env steps: equal only with one env.
        raise UsageError("the SB3 comparison supports n_step_return=1 and num_envs=1 only")
    if hp["layer_init"] != "torch":
        # SB3's Q-network keeps nn.Linear's init; Keras' Glorot init learned CartPole on 2 seeds of 5 where the
        # torch init learned it on 4 (docs/benchmarks.md, dqn-cartpole).
        raise UsageError("SB3's DQN initializes its layers as PyTorch does; compare with a preset that sets "
                         "layer_init=torch")
    return dict(
        learning_rate=hp["learning_rate"], buffer_size=hp["replay_capacity"], learning_starts=hp["learning_starts"],
        batch_size=hp["batch_size"], tau=hp["target_update_tau"], gamma=hp["gamma"], train_freq=hp["train_period_env_steps"],
        gradient_steps=hp["gradient_steps_per_train"], target_update_interval=hp["target_update_period_env_steps"],
        exploration_fraction=hp["epsilon_decay_fraction"], exploration_initial_eps=hp["epsilon_start"],
        exploration_final_eps=hp["epsilon_end"], max_grad_norm=hp["max_grad_norm"] or float("inf"),
        policy_kwargs=dict(net_arch=list(hp["hidden_sizes"]), optimizer_kwargs=dict(eps=hp["adam_epsilon"])),
    )


def q_learning_rate(hp: dict):
    """DQN's step size as SB3 takes it: a number, or where it falls (final_learning_rate_fraction < 1) the same
    line as a function of SB3's progress_remaining. tfrl's falls over the run's gradient steps, which begin at
    learning_starts: SB3's then falls from learning_starts too (updated once a train call, where tfrl's moves
    every gradient step), not from env step 0 as the zoo's lin_ schedules."""
    initial, fraction = hp["learning_rate"], hp["final_learning_rate_fraction"]
    if fraction == 1.0:
        return initial
    total, start = hp["total_env_steps"], hp["learning_starts"]

    def schedule(progress_remaining: float) -> float:
        done = min(max(((1.0 - progress_remaining) * total - start) / max(total - start, 1), 0.0), 1.0)
        return initial * (1.0 - (1.0 - fraction) * done)

    return schedule


def qrdqn_kwargs(hp: dict) -> dict:
    """sb3-contrib QR-DQN arguments: DQN's translation, and the quantiles (sb3-contrib's quantile Huber loss has
    kappa 1 and picks the bootstrap action with the target network, as tfrl's double_dqn=false)."""
    if hp["quantile_huber_kappa"] != 1.0:
        raise UsageError("sb3-contrib's QR-DQN has kappa 1 only; compare with quantile_huber_kappa=1")
    kwargs = dqn_kwargs(hp, "sb3-contrib's QR-DQN")
    kwargs["policy_kwargs"]["n_quantiles"] = hp["num_quantiles"]
    return kwargs


def sb3_schedule(initial: float, kind: str):
    """tfrl's schedule by name (tfrl.schedules: "constant" or "linear") as SB3 takes it: a number, or a function of
    SB3's progress_remaining, which runs from 1 to 0 over total_timesteps."""
    if kind == "constant":
        return initial
    return lambda progress_remaining: progress_remaining * initial


def a2c_kwargs(hp: dict) -> dict:
    """SB3 A2C arguments for tfrl A2CConfig fields; UsageError for settings SB3's A2C does not have."""
    import torch

    if hp["shared_torso"]:
        raise UsageError("SB3 (2.x) has no shared actor-critic torso; compare with shared_torso=false")
    if hp["optimizer"] != "rmsprop":
        raise UsageError("the SB3 comparison supports optimizer=rmsprop only")
    learning_rate = sb3_schedule(hp["learning_rate"], hp["lr_schedule"])
    activation = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[hp["activation"]]
    return dict(
        learning_rate=learning_rate, n_steps=hp["rollout_length"], gamma=hp["gamma"], gae_lambda=hp["gae_lambda"],
        ent_coef=hp["entropy_coef"], vf_coef=hp["value_coef"], max_grad_norm=hp["max_grad_norm"] or float("inf"),
        normalize_advantage=hp["normalize_advantage"], use_rms_prop=True, rms_prop_eps=hp["rmsprop_epsilon"],
        policy_kwargs=dict(
            net_arch=dict(pi=list(hp["hidden_sizes"]), vf=list(hp["hidden_sizes"])), activation_fn=activation,
            # Given explicitly, because SB3 otherwise fixes alpha at 0.99 whatever rmsprop_decay says.
            optimizer_class=torch.optim.RMSprop,
            optimizer_kwargs=dict(alpha=hp["rmsprop_decay"], eps=hp["rmsprop_epsilon"], weight_decay=0),
            **_init_kwargs(hp)),
    )


def ppo_kwargs(hp: dict, activations: dict | None = None) -> dict:
    """SB3 PPO arguments for tfrl PPOConfig fields; UsageError for settings SB3's PPO does not have. activations:
    tfrl's activation names -> the library's (default: torch's modules, as SB3 takes them)."""
    if activations is None:
        import torch

        activations = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}
    if hp["shared_torso"]:
        raise UsageError("SB3 (2.x) has no shared actor-critic torso; compare with shared_torso=false")

    activation = activations[hp["activation"]]
    return dict(
        learning_rate=sb3_schedule(hp["learning_rate"], hp["lr_schedule"]), n_steps=hp["rollout_length"],
        batch_size=hp["batch_size"], n_epochs=hp["n_epochs"], gamma=hp["gamma"], gae_lambda=hp["gae_lambda"],
        clip_range=sb3_schedule(hp["clip_range"], hp["clip_range_schedule"]), ent_coef=hp["entropy_coef"],
        vf_coef=hp["value_coef"], max_grad_norm=hp["max_grad_norm"] or float("inf"),  # tfrl's 0 = no clip
        normalize_advantage=hp["normalize_advantage"],
        policy_kwargs=dict(net_arch=dict(pi=list(hp["hidden_sizes"]), vf=list(hp["hidden_sizes"])),
                           activation_fn=activation, optimizer_kwargs=dict(eps=hp["adam_epsilon"]),
                           **_init_kwargs(hp)),
    )


def _init_kwargs(hp: dict) -> dict:
    """SB3's ortho_init and log_std_init for tfrl's layer_init and log_std_init, where they differ from the
    defaults they share (orthogonal, 0)."""
    kwargs = {}
    if hp["layer_init"] != "orthogonal":
        kwargs["ortho_init"] = False  # torch: PyTorch's nn.Linear default, which SB3 then keeps
    if hp["log_std_init"] != 0.0:
        kwargs["log_std_init"] = hp["log_std_init"]
    return kwargs


def recurrent_ppo_kwargs(hp: dict) -> dict:
    """sb3-contrib RecurrentPPO arguments: PPO's, an LSTM of lstm_units for the policy and one for the value (the
    rl-baselines3-zoo's ppo_lstm settings: enable_critic_lstm, ortho_init=False), its net_arch tfrl's
    post_lstm_sizes (MlpLstmPolicy reads the observations with its LSTMs, then runs net_arch)."""
    if hp.get("sequence_length") and hp["sequence_length"] != hp["batch_size"]:
        raise UsageError("RecurrentPPO cuts its minibatches of batch_size steps at episode starts; compare with "
                         "sequence_length=0 or equal to batch_size")
    if hp["hidden_sizes"]:
        raise UsageError("sb3-contrib's MlpLstmPolicy has no layers before its LSTM: compare with hidden_sizes=[] "
                         "and the layers after the LSTM in post_lstm_sizes")
    kwargs = ppo_kwargs(hp)
    post = list(hp["post_lstm_sizes"])
    kwargs["policy_kwargs"].update(net_arch=dict(pi=post, vf=post), lstm_hidden_size=hp["lstm_units"],
                                   enable_critic_lstm=True, ortho_init=False)
    return kwargs


class RecurrentGreedy:
    """RecurrentPPO's greedy policy as tfrl.run.evaluation runs one: obs -> actions, the LSTM states carried, and
    reset(done) starting the rows whose episodes ended afresh (SB3's episode_start)."""

    def __init__(self, model, normalize):
        self._model, self._normalize = model, normalize
        self._states, self._starts = None, None

    def __call__(self, obs):
        import numpy as np

        if self._starts is None:
            self._starts = np.ones(len(obs), bool)
        actions, self._states = self._model.predict(self._normalize(obs), state=self._states,
                                                    episode_start=self._starts, deterministic=True)
        self._starts = np.zeros(len(obs), bool)
        return actions

    def reset(self, done=None) -> None:
        if done is None or self._starts is None:
            self._states, self._starts = None, None
        else:
            self._starts = self._starts | done


def vec_normalize(env, hp: dict):
    """(env, obs -> obs as the policy reads them): SB3's VecNormalize when A2C or PPO normalizes, as tfrl does."""
    if not (hp.get("normalize_observations") or hp.get("normalize_rewards")):
        return env, lambda obs: obs
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(env, norm_obs=hp["normalize_observations"], norm_reward=hp["normalize_rewards"],
                       clip_obs=hp["observation_clip"], clip_reward=hp["reward_clip"], gamma=hp["gamma"])
    return env, env.normalize_obs  # the running statistics as they are, not updated by evaluation


def _off_policy_kwargs(hp: dict, algorithm: str) -> dict:
    """The arguments SB3's SAC and TD3 share, from OffPolicyConfig's fields; UsageError for settings neither has."""
    if hp["max_grad_norm"]:
        raise UsageError(f"SB3's {algorithm} does not clip gradients; compare with max_grad_norm=0")
    if hp["train_in_background"] or hp["normalize_observations"]:
        raise UsageError("the SB3 comparison supports train_in_background=false and normalize_observations=false only")
    if hp["num_envs"] != 1:  # SB3 counts train_freq in vector steps, tfrl in env steps
        raise UsageError("the SB3 comparison supports num_envs=1 only")
    return dict(
        learning_rate=hp["learning_rate"], buffer_size=hp["replay_capacity"], learning_starts=hp["learning_starts"],
        batch_size=hp["batch_size"], tau=hp["target_update_tau"], gamma=hp["gamma"],
        train_freq=hp["train_period_env_steps"], gradient_steps=hp["gradient_steps_per_train"],
        policy_kwargs=dict(net_arch=list(hp["hidden_sizes"])),
    )


def sac_kwargs(hp: dict) -> dict:
    """SB3 SAC arguments for tfrl SACConfig fields; UsageError for settings SB3's SAC does not have."""
    kwargs = _off_policy_kwargs(hp, "SAC")
    temperature = hp["initial_temperature"]
    kwargs.update(ent_coef=f"auto_{temperature}" if hp["learn_temperature"] else temperature,
                  target_entropy="auto" if hp["target_entropy"] is None else hp["target_entropy"])
    return kwargs


def tqc_kwargs(hp: dict) -> dict:
    """sb3-contrib TQC arguments: SAC's translation, and the critics' quantiles and truncation."""
    kwargs = sac_kwargs(hp)
    kwargs["top_quantiles_to_drop_per_net"] = hp["top_quantiles_to_drop_per_net"]
    kwargs["policy_kwargs"].update(n_quantiles=hp["num_quantiles"], n_critics=hp["num_critics"])
    return kwargs


def crossq_kwargs(hp: dict, library: str = "sb3") -> dict:
    """sb3-contrib's (library "sb3") or SBX's CrossQ arguments: SAC's translation without tau (neither takes one:
    no target networks), with the delayed actor, the two network widths and the batch renormalization. sb3-contrib
    writes the momentum as the share the new batch gets (1 - tfrl's), SBX as tfrl does; both take Adam's beta_1
    0.5 by default; SBX's epsilon is fixed at 1e-3."""
    kwargs = sac_kwargs(hp)
    del kwargs["tau"]
    if library == "sbx" and hp["batch_norm_epsilon"] != 1e-3:
        raise UsageError("SBX's CrossQ fixes the batch renormalization's epsilon at 1e-3")
    if library == "sb3" and not hp["actor_batch_norm"]:
        raise UsageError("sb3-contrib's CrossQ renormalizes the actor whenever it renormalizes the critics")
    momentum = hp["batch_norm_momentum"] if library == "sbx" else 1.0 - hp["batch_norm_momentum"]
    policy = dict(net_arch=dict(pi=list(hp["hidden_sizes"]), qf=list(hp["critic_hidden_sizes"])),
                  batch_norm_momentum=momentum, renorm_warmup_steps=hp["renorm_warmup_steps"])
    if library == "sbx":
        policy.update(batch_norm_actor=hp["actor_batch_norm"], optimizer_kwargs={"b1": hp["adam_beta_1"]})
    else:
        policy.update(batch_norm_eps=hp["batch_norm_epsilon"],
                      optimizer_kwargs={"betas": (hp["adam_beta_1"], 0.999)})
    kwargs.update(policy_delay=hp["policy_delay"], policy_kwargs=policy)
    return kwargs


def td3_kwargs(hp: dict, action_size: int) -> dict:
    """SB3 TD3 arguments for tfrl TD3Config fields; UsageError for settings SB3's TD3 does not have.

    The exploration noise is SB3's NormalActionNoise, std exploration_noise in each of the action_size dimensions:
    SB3 adds it to the action scaled to [-1, 1] and clips, as tfrl does. policy_delay counts gradient steps in both
    (the actor and the targets move on every policy_delay-th), so it holds however train_freq groups them."""
    import numpy as np
    from stable_baselines3.common.noise import NormalActionNoise

    kwargs = _off_policy_kwargs(hp, "TD3")
    kwargs.update(policy_delay=hp["policy_delay"], target_policy_noise=hp["target_policy_noise"],
                  target_noise_clip=hp["target_noise_clip"],
                  action_noise=NormalActionNoise(mean=np.zeros(action_size),
                                                 sigma=np.full(action_size, hp["exploration_noise"])))
    return kwargs


def sbx_kwargs(agent: str, hp: dict, action_size: int | None = None) -> dict:
    """SBX (Stable-Baselines-Jax) arguments: SB3's translation of the same settings, adapted where SBX differs.
    DQN: SBX's has no max_grad_norm argument, so the global-norm clip is chained in front of its Adam. PPO: flax's
    activations, and SB3's orthogonal init (SBX defaults to none). The networks' initial weights follow each
    library's own scheme (tfrl's DQN presets and layer_init=torch for SB3 use PyTorch's; SBX keeps flax's).

    TD3 (action_size: the env's action dimensions, for the exploration noise): the same arguments, but SBX's TD3
    (0.28) is not SB3's algorithm in two ways no argument changes: its target networks take their Polyak step on
    every gradient step, where SB3's and tfrl's take it on every policy_delay-th only, and its actor maximizes the
    smaller of the two critics, where SB3's and tfrl's maximize the first."""
    if agent == "dqn":
        import optax

        kwargs = dqn_kwargs(hp)
        clip, eps = kwargs.pop("max_grad_norm"), kwargs["policy_kwargs"].pop("optimizer_kwargs")["eps"]

        def clipped_adam(learning_rate):
            return optax.chain(optax.clip_by_global_norm(clip), optax.adam(learning_rate, eps=eps))

        kwargs["policy_kwargs"]["optimizer_class"] = clipped_adam
        return kwargs
    if agent == "ppo":
        import flax.linen

        kwargs = ppo_kwargs(hp, {"tanh": flax.linen.tanh, "relu": flax.linen.relu})
        kwargs["policy_kwargs"].setdefault("ortho_init", True)  # SBX's default is False (flax's init)
        return kwargs
    if agent == "sac":
        return sac_kwargs(hp)
    if agent == "td3":
        return td3_kwargs(hp, action_size)
    if agent == "tqc":
        return tqc_kwargs(hp)
    if agent == "crossq":
        return crossq_kwargs(hp, "sbx")
    raise UsageError(f"the SBX comparison covers dqn, ppo, sac, td3, tqc and crossq, not {agent}")


def build_sbx_model(spec: dict):
    """The SBX model and its greedy policy (SBX has no masked or recurrent PPO)."""
    from stable_baselines3.common.env_util import make_vec_env

    hp, seed, agent = spec["hparams"], spec["seed"], spec["agent"]
    if has_action_masks(spec["env_id"]) or hp.get("lstm_units"):
        raise UsageError("SBX has no masked or recurrent PPO; compare those with --libs=tfrl,sb3")
    # SBX imports tensorflow_probability's JAX substrate, which must not find TensorFlow (blocked in main).
    sbx = errors.require_extra("sbx", "bench-jax", "the SBX runner")
    env = make_vec_env(spec["env_id"], n_envs=hp["num_envs"], seed=seed)
    kwargs = sbx_kwargs(agent, hp, action_size(env))
    normalize = lambda obs: obs  # noqa: E731
    if agent == "ppo":
        env, normalize = vec_normalize(env, hp)
    model = {"dqn": sbx.DQN, "ppo": sbx.PPO, "sac": sbx.SAC, "td3": sbx.TD3, "tqc": sbx.TQC,
             "crossq": sbx.CrossQ}[agent]("MlpPolicy", env, seed=seed, **kwargs)
    return env, model, lambda obs: model.predict(normalize(obs), deterministic=True)[0]


def action_size(env) -> int | None:
    """The number of action dimensions of a (vector) env with Box actions; None for other action spaces."""
    shape = getattr(env.action_space, "shape", None)
    return int(shape[0]) if shape else None


def limit_jax_threads(threads: int) -> None:
    """Before jax is imported: XLA's CPU client on one thread when threads is 1 (no Eigen thread pool), and the
    process pinned to `threads` CPUs either way, so that SBX uses the cores tfrl and SB3 get."""
    import os

    if threads == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1").strip()
    available = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, available[:threads])


MASK_KEY = "action_mask"


def has_action_masks(env_id: str) -> bool:
    import gymnasium as gym

    probe = gym.make(env_id)
    try:
        return callable(getattr(probe.unwrapped, "action_masks", None))
    finally:
        probe.close()


def without_mask(env):
    """The env's Dict observation without its action_mask entry, flattened into one vector for MlpPolicy."""
    import gymnasium as gym

    keys = [key for key in env.observation_space.spaces if key != MASK_KEY]
    return gym.wrappers.FlattenObservation(gym.wrappers.FilterObservation(env, keys))


def build_model(spec: dict, sb3):
    """The SB3 model (MaskablePPO for an env with action masks) and its greedy policy over tfrl's observation
    batches (numpy structured arrays for Dict observations)."""
    from stable_baselines3.common.env_util import make_vec_env

    hp, seed, agent = spec["hparams"], spec["seed"], spec["agent"]
    masked = has_action_masks(spec["env_id"])
    # Sub-env i is seeded seed + i, as tfrl's.
    env = make_vec_env(spec["env_id"], n_envs=hp["num_envs"], seed=seed, wrapper_class=without_mask if masked else None)
    normalize = lambda obs: obs  # noqa: E731
    if agent in ("a2c", "ppo"):
        env, normalize = vec_normalize(env, hp)
    if agent == "ppo" and hp.get("lstm_units"):
        if masked:
            raise UsageError("the SB3 comparison has no recurrent MaskablePPO; compare memory on an env without masks")
        sb3_contrib = errors.require_extra("sb3_contrib", "bench", "the Stable-Baselines3 runner")
        model = sb3_contrib.RecurrentPPO("MlpLstmPolicy", env, seed=seed, device="cpu", **recurrent_ppo_kwargs(hp))
        return env, model, RecurrentGreedy(model, normalize)
    if masked:
        if agent != "ppo":
            raise UsageError(f"the SB3 comparison masks actions with sb3-contrib's MaskablePPO only, not {agent}")
        sb3_contrib = errors.require_extra("sb3_contrib", "bench", "the Stable-Baselines3 runner")
        model = sb3_contrib.MaskablePPO("MlpPolicy", env, seed=seed, device="cpu", **ppo_kwargs(hp))
        inputs = without_mask_keys(spec["env_id"])

        def greedy(obs):  # a structured batch: the same entries, flattened in the same order, and the mask
            import numpy as np

            flat = np.concatenate([obs[key].reshape(len(obs), -1) for key in inputs], axis=1)
            return model.predict(normalize(flat), deterministic=True, action_masks=obs[MASK_KEY].astype(bool))[0]

        return env, model, greedy
    model_class = {"dqn": sb3.DQN, "a2c": sb3.A2C, "ppo": sb3.PPO, "sac": sb3.SAC, "td3": sb3.TD3}.get(agent)
    if agent in ("qrdqn", "tqc", "crossq"):
        sb3_contrib = errors.require_extra("sb3_contrib", "bench", "the Stable-Baselines3 runner")
        model_class = {"qrdqn": sb3_contrib.QRDQN, "tqc": sb3_contrib.TQC, "crossq": sb3_contrib.CrossQ}[agent]
    if model_class is None:
        raise UsageError(f"unknown agent {agent!r}")
    if agent == "td3":
        kwargs = td3_kwargs(hp, action_size(env))
    else:
        kwargs = {"dqn": dqn_kwargs, "qrdqn": qrdqn_kwargs, "a2c": a2c_kwargs, "ppo": ppo_kwargs,
                  "sac": sac_kwargs, "tqc": tqc_kwargs, "crossq": crossq_kwargs}[agent](hp)
    model = model_class("MlpPolicy", env, seed=seed, device="cpu", **kwargs)
    return env, model, lambda obs: model.predict(normalize(obs), deterministic=True)[0]


def without_mask_keys(env_id: str) -> list[str]:
    """The keys without_mask keeps, in FlattenObservation's order (the Dict space's)."""
    import gymnasium as gym

    probe = gym.make(env_id)
    try:
        return [key for key in probe.observation_space.spaces if key != MASK_KEY]
    finally:
        probe.close()


def _training_curve(base_callback: type, metrics, log_interval: int):
    """An SB3 callback (a subclass of SB3's BaseCallback, given so that this module imports SB3 only when it runs)
    writing tfrl-shaped "train" records to `metrics` from the Monitor episode infos, every log_interval env steps."""

    class TrainingCurve(base_callback):
        def __init__(self, log_interval: int):
            super().__init__()
            self.log_interval = log_interval
            self.episodes: list[tuple[float, int]] = []

        def _on_training_start(self) -> None:
            self.start = self.last_time = time.perf_counter()
            self.last_step, self.next_log_at = 0, self.log_interval

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.episodes.append((float(info["episode"]["r"]), int(info["episode"]["l"])))
            if self.num_timesteps >= self.next_log_at:
                self.write()
                while self.next_log_at <= self.num_timesteps:
                    self.next_log_at += self.log_interval
            return True

        def write(self) -> None:
            now = time.perf_counter()
            record = {"kind": "train", "env_step": self.num_timesteps, "wall_time_s": round(now - self.start, 3),
                      "env_steps_per_s": (self.num_timesteps - self.last_step) / max(now - self.last_time, 1e-9)}
            if self.episodes:
                record.update(episodes=len(self.episodes),
                              episode_return_mean=sum(r for r, _ in self.episodes) / len(self.episodes),
                              episode_length_mean=sum(n for _, n in self.episodes) / len(self.episodes))
            metrics.write(json.dumps(record) + "\n")
            self.episodes.clear()
            self.last_time, self.last_step = now, self.num_timesteps

    return TrainingCurve(log_interval)


def main(argv):
    cli.no_extra_args(argv)
    if not FLAGS.spec or not FLAGS.run_dir:
        raise UsageError("--spec and --run_dir are required")
    spec = json.loads(pathlib.Path(FLAGS.spec).read_text())
    # SB3's logger imports torch.utils.tensorboard, and TensorBoard imports TensorFlow when it finds it
    # (here it does: tfrl's environment). That would add TF's import time and ~400 MB to SB3's numbers,
    # which an SB3 user without TF never pays; TensorBoard falls back to its stub without it.
    sys.modules["tensorflow"] = None  # makes `import tensorflow` raise ImportError in this process
    if FLAGS.library == "sbx":
        limit_jax_threads(spec["threads"])
    torch = errors.require_extra("torch", "bench", "the Stable-Baselines3 runner")
    sb3 = errors.require_extra("stable_baselines3", "bench", "the Stable-Baselines3 runner")
    from stable_baselines3.common.callbacks import BaseCallback

    # Before any torch op; compare.py gives tfrl the same numbers as --intra_op_threads/--inter_op_threads.
    torch.set_num_threads(spec["threads"])
    torch.set_num_interop_threads(spec["threads"])
    hp, seed = spec["hparams"], spec["seed"]
    run_dir = pathlib.Path(FLAGS.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    # SB3's logger makes a folder even when it writes nothing: $SB3_LOGDIR, else a new /tmp/SB3-<time> per run.
    os.environ["SB3_LOGDIR"] = str(run_dir / "sb3-logger")
    metrics = open(run_dir / "metrics.jsonl", "w", buffering=1)

    env, model, greedy = build_sbx_model(spec) if FLAGS.library == "sbx" else build_model(spec, sb3)
    curve = _training_curve(BaseCallback, metrics, hp["log_interval"])
    model.learn(total_timesteps=hp["total_env_steps"], callback=curve)
    if curve.last_step != model.num_timesteps:
        curve.write()  # the last partial log interval
    env.close()

    # tfrl's loops evaluate on seed + 20_000 too: the same 100 episodes' start states.
    returns = evaluation.evaluate(greedy, spec["env_id"], hp["final_eval_episodes"], seed=seed + 20_000)
    metrics.write(json.dumps({
        "kind": "final_eval", "env_step": model.num_timesteps,
        "wall_time_s": round(time.perf_counter() - curve.start, 3),
        "return_mean": float(returns.mean()), "return_std": float(returns.std()), "episodes": len(returns)}) + "\n")
    metrics.close()
    print(f"final evaluation: return={returns.mean():.2f} +/- {returns.std():.2f} over {len(returns)} episodes",
          file=sys.stdout, flush=True)


if __name__ == "__main__":
    define_flags()
    cli.run(main)
