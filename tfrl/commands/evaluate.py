"""Run a trained greedy policy: N episodes, mean +/- std of return and length, optionally a video.

    tfrl evaluate --saved_model=runs/.../saved_models/dqn-CartPole-v1/1 --episodes=20
    tfrl evaluate --run_dir=runs/dqn-CartPole-v1-s0-... [--checkpoint=best|last|N] --video=cartpole.gif

--saved_model needs only TensorFlow and the SavedModel (tfrl.models.serving; the env id
comes from assets.extra/tfrl_metadata.json, or --env); --run_dir rebuilds the
agent's network and loads the policy the run exports (its best evaluated policy
if it keeps one, tfrl.run.best_policy, else its newest checkpoint's), or the one
--checkpoint names. --video records one episode:
the env reset with --seed, i.e. the first episode of the evaluation's env 0. GIF
or MP4, through imageio (pip install 'tfrl[video]'); GIFs get half the resolution
and half the frame rate, to stay small.
"""

from __future__ import annotations

import itertools
import pathlib

from absl import flags

from tfrl import cli, config as config_lib, envs, errors  # no TensorFlow yet: bad input is reported at once
from tfrl.errors import UsageError

flags.DEFINE_string("saved_model", None, "An exported SavedModel version directory (.../<model_name>/<version>).")
flags.DEFINE_string("run_dir", None, "A training run directory; one of its checkpoints is evaluated.")
flags.DEFINE_string("checkpoint", None, "With --run_dir: which policy: best (the run's best evaluated policy, kept with "
                    "--hp=keep_best_policy=true), last (the newest loadable checkpoint) or a checkpoint number N "
                    "(ckpt-N); default: the one the run exports (best if it keeps one, else last).")
flags.DEFINE_boolean("best", False, "With --run_dir: the same as --checkpoint=best.")
flags.DEFINE_string("env", None, "Environment id (or module:Id); default: the one the policy was trained on.")
flags.DEFINE_multi_string("env_kwargs", [], "Keyword argument of gymnasium.make, key=value, repeatable; default: "
                          "the ones the policy was trained with.")
flags.DEFINE_integer("episodes", 10, "Number of greedy episodes.")
flags.DEFINE_integer("seed", 0, "Seed of the evaluation envs (env i is reset with seed + i).")
flags.DEFINE_integer("num_envs", 8, "Envs run in parallel (each runs an equal share of the episodes).")
flags.DEFINE_string("video", None, "Record one episode to this file: .gif or .mp4 (needs pip install 'tfrl[video]').")

FLAGS = flags.FLAGS
VIDEO_SUFFIXES = (".gif", ".mp4")


def check_flags() -> pathlib.Path | None:
    """Every check that needs no TensorFlow; returns the video path, if any."""
    if bool(FLAGS.saved_model) == bool(FLAGS.run_dir):
        raise UsageError("give exactly one of --saved_model=DIR and --run_dir=DIR")
    if FLAGS.checkpoint is not None and not FLAGS.run_dir:
        raise UsageError("--checkpoint needs --run_dir")
    if FLAGS.best and not FLAGS.run_dir:
        raise UsageError("--best needs --run_dir")
    if FLAGS.best and FLAGS.checkpoint not in (None, "best"):
        raise UsageError("give --checkpoint or --best, not both")
    for flag in ("saved_model", "run_dir"):
        if FLAGS[flag].value and not pathlib.Path(FLAGS[flag].value).is_dir():
            raise UsageError(f"--{flag}: directory {FLAGS[flag].value} does not exist")
    cli.check_run_dir(FLAGS.run_dir)
    if FLAGS.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {FLAGS.episodes}")
    if FLAGS.num_envs < 1:
        raise UsageError(f"--num_envs must be >= 1, got {FLAGS.num_envs}")
    if FLAGS.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {FLAGS.seed}")
    cli.check_checkpoint_flag(FLAGS.checkpoint)
    if FLAGS.env:
        envs.resolve_env_id(FLAGS.env)
    envs.check_render_mode(config_lib.parse_cli_overrides(FLAGS.env_kwargs, "--env_kwargs"))
    if not FLAGS.video:
        return None
    video = pathlib.Path(FLAGS.video)
    if video.suffix.lower() not in VIDEO_SUFFIXES:
        raise UsageError(f"--video: {video} must end in {' or '.join(VIDEO_SUFFIXES)}")
    if not video.parent.is_dir():
        raise UsageError(f"--video: directory {video.parent} does not exist")
    errors.check_output_dir("video", video.parent)
    errors.require_extra("imageio.v2", "video", "--video")
    if video.suffix.lower() == ".mp4":
        errors.require_extra("imageio_ffmpeg", "video", "--video=*.mp4")
    return video


def _described(observations) -> str:
    """"of shape (4,)", or a Dict observation's "{key: shape, ...}" (input names, as a signature has them)."""
    if not observations.structured:
        return f"of shape {observations.fields[0].shape}"
    return str({field.key.replace(".", "_"): field.shape for field in observations.fields})


def _check_actions(policy_actions: dict | None, env_actions: dict, env_name: str) -> None:
    """UsageError where the policy answers in actions the env cannot take: another kind of space, a Box of another
    shape, or a hybrid action of other parts (by key and kind). Bounds and counts may differ (as before); a
    SavedModel without tfrl's metadata is not checked."""
    if policy_actions is None:
        return
    policy_form, env_form = _action_form(policy_actions), _action_form(env_actions)
    if policy_form == env_form:
        return
    if isinstance(policy_form[1], dict) and isinstance(env_form[1], dict) and set(policy_form[1]) != set(env_form[1]):
        raise UsageError(f"the policy answers the action parts {sorted(policy_form[1])}, but {env_name} takes "
                         f"{sorted(env_form[1])}: evaluate it on the env it was trained on")
    raise UsageError(f"the policy answers {_described_actions(policy_actions)}, but {env_name} takes "
                     f"{_described_actions(env_actions)}: evaluate it on the env it was trained on")


def _action_form(space: dict) -> tuple:
    """What an action must look like for a step to take it: the space's type, and a Box's shape, a MultiDiscrete's
    length or a hybrid action's parts (key -> kind and shape)."""
    kind = space.get("type")
    if kind in ("Dict", "Tuple"):
        return kind, {part.get("key"): (part.get("kind"), tuple(part.get("shape") or ()), len(part.get("nvec") or ()))
                      for part in space.get("parts") or ()}
    return kind, tuple(space.get("shape") or ()), len(space.get("nvec") or ())


def _described_actions(space: dict) -> str:
    if space.get("type") in ("Dict", "Tuple"):
        parts = ", ".join(f"{part.get('key')}: {part.get('kind')}" for part in space.get("parts") or ())
        return f"{space['type']} actions ({parts})"
    shape = f" of shape {tuple(space['shape'])}" if space.get("shape") else ""
    return f"{space.get('type')} actions{shape}"


def write_video(frames, fps: int, path: pathlib.Path) -> None:
    """Streams `frames` (RGB uint8 [H, W, 3]) into a GIF or MP4 with imageio."""
    imageio = errors.require_extra("imageio.v2", "video", "--video")
    if path.suffix.lower() == ".mp4":
        # Frames of gymnasium's classic-control and box2d envs are 400x600: 8x8 macro blocks fit without resizing.
        writer, stride = imageio.get_writer(path, fps=fps, macro_block_size=8), 1
    else:
        # Every 2nd frame at half size; GIF delays are in ms, and browsers slow down those under 20 ms.
        writer, stride = imageio.get_writer(path, mode="I", duration=round(2000 / fps), loop=0), 2
    try:
        for i, frame in enumerate(frames):
            if i % stride == 0:
                writer.append_data(frame if stride == 1 else frame[::2, ::2])
    finally:
        writer.close()


def main(argv):
    cli.no_extra_args(argv)
    video = check_flags()
    from tfrl.models import serving  # imports TensorFlow (seconds): after the checks above
    from tfrl.run import evaluation, runs

    if FLAGS.saved_model:
        served = serving.load(pathlib.Path(FLAGS.saved_model))
        metadata = served.metadata or {}
        policy, observations = served.policy, served.observations
        env_id, env_kwargs = metadata.get("env_id"), metadata.get("env_kwargs") or {}
        actions = metadata.get("action_space")
    else:
        loaded = runs.load_policy(pathlib.Path(FLAGS.run_dir), FLAGS.checkpoint, best=FLAGS.best)
        observations = loaded.env.observations
        policy = serving.traced_policy(loaded.policy, observations)
        env_id, env_kwargs = loaded.run_config.env_id, loaded.run_config.env_kwargs
        actions = loaded.env.action_space_json()
        which = "the best policy" if loaded.best else f"checkpoint {loaded.checkpoint}"
        print(f"{which} of {FLAGS.run_dir} (trained {loaded.env_step} env steps)", flush=True)
    env_id = FLAGS.env or env_id
    if not env_id:
        raise UsageError(f"{FLAGS.saved_model} has no tfrl metadata naming its env; pass --env")
    if FLAGS.env_kwargs:
        env_kwargs = {key: config_lib.parse_value(value)
                      for key, value in config_lib.parse_cli_overrides(FLAGS.env_kwargs, "--env_kwargs").items()}
    env_id = envs.as_spec(env_id, env_kwargs)
    env_info = runs.probe_env_info(env_id)
    if _described(env_info.observations) != _described(observations):
        raise UsageError(f"the policy takes observations {_described(observations)}, but {env_id.name} gives "
                         f"{_described(env_info.observations).removeprefix('of shape ')}: evaluate it on the env "
                         "it was trained on")
    _check_actions(actions, env_info.action_space_json(), env_id.name)

    returns, lengths = evaluation.evaluate_episodes(policy, env_id, FLAGS.episodes, FLAGS.seed, FLAGS.num_envs)
    print(f"{len(returns)} episodes of {env_id.name} (seed {FLAGS.seed}): "
          f"return {returns.mean():.2f} +/- {returns.std():.2f}, "
          f"length {lengths.mean():.1f} +/- {lengths.std():.1f}", flush=True)
    if video is not None:
        stats: dict = {}
        frames = evaluation.render_episode(policy, env_id, FLAGS.seed, stats)
        first = next(frames)  # the env exists now: stats["fps"] is set
        write_video(itertools.chain([first], frames), stats["fps"], video)
        print(f"video: {video} (one episode, seed {FLAGS.seed}: return {stats['return']:.2f}, "
              f"length {stats['length']})", flush=True)


def run() -> None:
    cli.run(main)


if __name__ == "__main__":
    run()
