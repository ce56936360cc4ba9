"""Bad input to scripts/export.py, evaluate.py and plot.py: one line on stderr, exit code 2, no traceback, nothing
written. (scripts/train.py's matrix is in test_train_script.py; the cases already in test_evaluate_plot_scripts.py,
e.g. a missing --saved_model directory, are not repeated here.)

Most cases are rejected before TensorFlow loads (a fraction of a second each); the damaged-file cases need it.
"""

import concurrent.futures
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from tfrl.agents.dqn import networks as dqn_networks, policy as dqn_policy
from tfrl.agents.dqn.config import DQNConfig
from tfrl.envs import EnvInfo
from tfrl.models import export
from tfrl.run import best_policy, checkpoints

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
_TF_NOISE = re.compile(r"^(WARNING: All log messages before absl::InitializeLog\(\)|[IWE]0000 00:00:|"
                       r"To enable the following instructions:)")
# absl log lines (e.g. the warning naming each damaged checkpoint file): logs, not the error line.
_LOG_LINE = re.compile(r"^[IWEF] \d\d:\d\d:\d\d ")  # tfrl.hardware.quiet_logs.SHORT_FORMAT
INFO = EnvInfo(env_id="CartPole-v1", obs_shape=(4,), num_actions=2)


def _truncate(path: pathlib.Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _make_files(base: pathlib.Path) -> None:
    """A run with checkpoints 1 and 2, the same run with both truncated, a SavedModel and two damaged copies."""
    config = DQNConfig(hidden_sizes=(8,))
    run = base / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"agent": "dqn", "env_id": "CartPole-v1", "seed": 0,
                                                 "hparams": {"hidden_sizes": [8]}}))
    policy = dqn_policy.serving_policy(config, INFO)
    checkpointer = checkpoints.Checkpointer(run, policy.checkpoint_items)
    checkpointer.save(100, {})
    checkpointer.save(200, {})
    shutil.copytree(run, base / "truncated_run")
    for number in (1, 2):
        _truncate(base / "truncated_run" / "checkpoints" / f"ckpt-{number}.data-00000-of-00001")

    q_network = dqn_networks.q_network(INFO.obs_shape, INFO.num_actions, config.hidden_sizes)
    saved_model = export.export_saved_model(dqn_policy.serving_policy(config, INFO, q_network), INFO.obs_shape,
                                            base / "models", "cartpole", {"agent": "dqn", "env_id": "CartPole-v1"})
    shutil.copytree(saved_model, base / "truncated_pb")
    _truncate(base / "truncated_pb" / "saved_model.pb")
    shutil.copytree(saved_model, base / "truncated_variables")
    _truncate(base / "truncated_variables" / "variables" / "variables.data-00000-of-00001")
    # A run whose best policy (tfrl.run.best_policy) is truncated.
    shutil.copytree(run, base / "run_with_truncated_best")
    checkpoints.Checkpointer(base / "run_with_truncated_best", policy.checkpoint_items, keep=1,
                             subdir=best_policy.BEST_POLICY_DIR).save(150, {"eval_return_mean": 9.5})
    _truncate(base / "run_with_truncated_best" / best_policy.BEST_POLICY_DIR / "ckpt-1.data-00000-of-00001")
    (base / "no_run").mkdir()
    (base / "a_file").write_text("not a directory\n")


# (case id, script, arguments ({base} is the fixture dir), the start of the one error line after "<script>: error: ")
CASES = [
    ("export-missing-run-dir", "export.py", ["--run_dir=no/such/run", "--model_name=m"],
     "run directory no/such/run does not exist"),
    ("export-missing-model-name", "export.py", ["--run_dir={base}/run"], "--run_dir and --model_name are required"),
    ("export-zero-checkpoint", "export.py", ["--run_dir={base}/run", "--model_name=m", "--checkpoint=0"],
     "--checkpoint must be best, last or a checkpoint number >= 1, got '0'"),
    ("export-word-checkpoint", "export.py", ["--run_dir={base}/run", "--model_name=m", "--checkpoint=newest"],
     "--checkpoint must be best, last or a checkpoint number >= 1, got 'newest'"),
    ("export-nested-model-name", "export.py", ["--run_dir={base}/run", "--model_name=a/b"],
     "--model_name must be a plain directory name, got 'a/b'"),
    ("export-base-path-not-creatable", "export.py",
     ["--run_dir={base}/run", "--model_name=m", "--base_path={base}/a_file/models"],
     "--base_path: cannot create {base}/a_file/models: {base}/a_file is not a directory"),
    ("export-not-a-run", "export.py", ["--run_dir={base}/no_run", "--model_name=m"],
     "{base}/no_run/config.json does not exist: {base}/no_run is not a tfrl run directory"),
    ("export-extra-argument", "export.py", ["--run_dir={base}/run", "--model_name=m", "stray"],
     "unexpected arguments: stray"),
    ("export-unknown-checkpoint", "export.py", ["--run_dir={base}/run", "--model_name=m", "--checkpoint=7"],
     "checkpoint 7 does not exist in {base}/run/checkpoints (available: 1, 2)"),
    ("export-best-and-checkpoint", "export.py", ["--run_dir={base}/run", "--model_name=m", "--best", "--checkpoint=1"],
     "give --checkpoint or --best, not both"),
    ("export-no-best-policy", "export.py", ["--run_dir={base}/run", "--model_name=m", "--best"],
     "{base}/run has no best policy (it is kept by runs trained with --hp=keep_best_policy=true)"),
    ("export-truncated-best-policy", "export.py",
     ["--run_dir={base}/run_with_truncated_best", "--model_name=m", "--best"],
     "none of the checkpoints [1] in {base}/run_with_truncated_best/best_policy can be loaded"),
    ("evaluate-best-and-checkpoint", "evaluate.py", ["--run_dir={base}/run", "--best", "--checkpoint=1"],
     "give --checkpoint or --best, not both"),
    ("evaluate-best-without-run", "evaluate.py", ["--saved_model={base}/models/cartpole/1", "--best"],
     "--best needs --run_dir"),
    ("evaluate-truncated-best-policy", "evaluate.py", ["--run_dir={base}/run_with_truncated_best", "--best"],
     "none of the checkpoints [1] in {base}/run_with_truncated_best/best_policy can be loaded"),
    ("evaluate-zero-episodes", "evaluate.py", ["--run_dir={base}/run", "--episodes=0"],
     "--episodes must be >= 1, got 0"),
    ("evaluate-negative-envs", "evaluate.py", ["--run_dir={base}/run", "--num_envs=-2"],
     "--num_envs must be >= 1, got -2"),
    ("evaluate-negative-seed", "evaluate.py", ["--run_dir={base}/run", "--seed=-1"], "--seed must be >= 0, got -1"),
    ("evaluate-unknown-env", "evaluate.py", ["--run_dir={base}/run", "--env=CartPole-v9"],
     "unknown environment id 'CartPole-v9'; close matches: CartPole-v1"),
    ("evaluate-checkpoint-without-run", "evaluate.py", ["--saved_model={base}/models/cartpole/1", "--checkpoint=1"],
     "--checkpoint needs --run_dir"),
    ("evaluate-missing-run-dir", "evaluate.py", ["--run_dir=no/such/run"],
     "--run_dir: directory no/such/run does not exist"),
    ("evaluate-missing-video-dir", "evaluate.py", ["--run_dir={base}/run", "--video=no/such/dir/x.gif"],
     "--video: directory no/such/dir does not exist"),
    ("evaluate-wrong-env", "evaluate.py", ["--saved_model={base}/models/cartpole/1", "--env=LunarLander-v3"],
     "the policy takes observations of shape (4,), but LunarLander-v3 gives (8,): evaluate it on the env it was "
     "trained on"),
    ("evaluate-truncated-checkpoints", "evaluate.py", ["--run_dir={base}/truncated_run"],
     "none of the checkpoints [1, 2] in {base}/truncated_run/checkpoints can be loaded"),
    ("evaluate-truncated-saved-model-pb", "evaluate.py", ["--saved_model={base}/truncated_pb"],
     "{base}/truncated_pb: cannot load the SavedModel, is it truncated or damaged?"),
    ("evaluate-truncated-saved-model-variables", "evaluate.py", ["--saved_model={base}/truncated_variables"],
     "{base}/truncated_variables: cannot load the SavedModel, is it truncated or damaged?"),
    ("plot-out-dir-missing", "plot.py", ["--runs={base}/run", "--out=no/such/dir/c.png"],
     "--out: directory no/such/dir does not exist"),
    ("plot-extra-argument", "plot.py", ["--runs={base}/run", "stray"], "unexpected arguments: stray"),
]


def _tree(base: pathlib.Path) -> set[str]:
    return {str(p.relative_to(base)) for p in base.rglob("*")}


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """The fixture files, and every case launched two at a time: (base dir, its tree, {case id: Future})."""
    base = tmp_path_factory.mktemp("bad_inputs")
    _make_files(base)
    tree = _tree(base)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")

    def launch(script, args):
        args = [arg.replace("{base}", str(base)) for arg in args]
        return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / script), *args], capture_output=True,
                              text=True, env=env, cwd=base, timeout=300)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    # The slow cases (they import TensorFlow) first, so that the fast ones fill the gaps.
    slow_words = ("truncated", "unknown-checkpoint", "no-best")
    order = sorted(CASES, key=lambda case: not any(word in case[0] for word in slow_words))
    futures = {case_id: pool.submit(launch, script, args) for case_id, script, args, _ in order}
    yield base, tree, futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("case_id, script, args, message", CASES, ids=[case[0] for case in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(launches, case_id, script, args, message):
    base, tree, futures = launches
    completed = futures[case_id].result()
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr
    lines = [line for line in completed.stderr.splitlines()
             if line.strip() and not _TF_NOISE.match(line) and not _LOG_LINE.match(line)]
    assert len(lines) == 1, completed.stderr[-3000:]
    assert lines[0].startswith(f"{script}: error: {message.replace('{base}', str(base))}"), lines[0]
    assert completed.stdout == ""
    assert _tree(base) == tree  # no half-written directory or file, here or in the run
