"""Tests for benchmarks/compare.py (tfrl against Stable-Baselines3), without SB3.

The harness runs for real with its library pair injected: tfrl (scripts/train.py, --quick) against
tests/compare_test_double_runner.py, a test double that writes known records. The table math is checked
against numbers worked out by hand; the docs are only ever written in a temporary copy.
"""

import dataclasses
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import types

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

import compare  # noqa: E402
import results_io  # noqa: E402
import sb3_runner  # noqa: E402
from compare_test_double_runner import CWD_LITTER  # noqa: E402  (tests/ is on sys.path, as for the other helpers)
from tfrl.errors import UsageError  # noqa: E402

DOUBLE_SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "compare_test_double_runner.py"
DOCS = REPO_ROOT / "docs" / "benchmarks" / "a2c-cartpole.md"


def make_test_double(name: str, order_log: pathlib.Path) -> compare.Runner:
    """A Runner that starts tests/compare_test_double_runner.py under `name`."""
    def command(spec, run_dir):
        return [sys.executable, str(DOUBLE_SCRIPT), f"--run_dir={run_dir}", f"--name={name}",
                f"--order_log={order_log}"]
    return compare.Runner(name, command)


def test_quick_tfrl_against_a_test_double_writes_records_table_docs_and_plot(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "benchmarks.md"
    docs.write_text(DOCS.read_text())
    real_docs_digest = hashlib.sha256(DOCS.read_bytes()).hexdigest()
    outputs = compare.Outputs(docs=docs, plot=tmp_path / "images" / "curves.png", results=tmp_path / "runs.jsonl")
    records, section = compare.compare("a2c-cartpole", [0], threads=1, quick=True,
                                       pair=(compare.TFRL, make_test_double("double", tmp_path / "order.log")),
                                       outputs=outputs, command="python benchmarks/compare.py --quick (test)")

    tfrl, double = records
    assert (tfrl["library"], tfrl["order"], double["library"], double["order"]) == ("tfrl", 0, "double", 1)
    # tfrl really trained: --quick's 4000 env steps, logged every 1000, 5 greedy CartPole episodes.
    assert tfrl["env_steps"] == 4000 and tfrl["eval_episodes"] == 5
    assert [step for step, _, _ in tfrl["curve"]] == [1000, 2000, 3000, 4000]
    assert 8 <= tfrl["return_mean"] <= 500  # a CartPole episode lasts 8 to 500 steps, +1 reward each
    assert tfrl["cpu_s"] > 0 and tfrl["peak_rss_mb"] > 100 and tfrl["wall_s"] > tfrl["train_s"] > 0
    assert "--hp=eval_interval=0" in tfrl["command"] and "--intra_op_threads=1" in tfrl["command"]
    # The double's known records: 4000 env steps at 1000/s -> 4 s; final return 100 + seed.
    assert double["train_s"] == 4.0 and double["env_steps_per_s"] == 1000.0
    assert double["return_mean"] == 100.0 and double["eval_episodes"] == 5
    assert double["curve"] == [[1000, 1.0, 1.0], [2000, 2.0, 2.0], [3000, 3.0, 3.0], [4000, 4.0, 4.0]]

    assert len(outputs.results.read_text().splitlines()) == 2
    assert outputs.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The training-time ratio of the table is tfrl's over the double's 4 s.
    ratio = re.search(r"\| training time \(s\) \| [\d.]+ \| 4\.0 \| ([\d.]+) \|", section)
    assert ratio and float(ratio.group(1)) == pytest.approx(tfrl["train_s"] / 4.0, abs=0.006)
    assert "In-graph floor" in section and "one update per call" in section
    assert "![a2c-cartpole learning curves](images/curves.png)" in section
    assert f"Each run (library, seed, the columns above): `{tmp_path.resolve() / 'runs.jsonl'}`" in section

    # Only the a2c-cartpole section of the copy changed; the real docs did not.
    start, end = "<!-- compare:a2c-cartpole start -->", "<!-- compare:a2c-cartpole end -->"
    original, written = DOCS.read_text(), docs.read_text()
    assert written.split(start)[0] == original.split(start)[0]
    assert written.split(end)[1] == original.split(end)[1]
    assert section.strip() in written
    assert hashlib.sha256(DOCS.read_bytes()).hexdigest() == real_docs_digest
    assert not (tmp_path / CWD_LITTER).exists()  # each run's working dir is its own, then deleted


def test_runs_alternate_a_b_seed_by_seed(tmp_path):
    order_log = tmp_path / "order.log"
    pair = (make_test_double("a", order_log), make_test_double("b", order_log))
    records, _ = compare.compare("dqn-cartpole", [0, 1, 2], threads=1, quick=True, pair=pair,
                                 measure_in_graph_floor=False)
    started = order_log.read_text().split("\n")[:-1]  # as the doubles saw it, not as the harness says
    assert started == ["a 0", "b 0", "a 1", "b 1", "a 2", "b 2"]
    assert [(r["order"], r["library"], r["seed"]) for r in records] == [
        (0, "a", 0), (1, "b", 0), (2, "a", 1), (3, "b", 1), (4, "a", 2), (5, "b", 2)]
    # --quick's DQN settings reach the runner: 3000 env steps logged every 500, 5 evaluation episodes.
    assert records[5]["curve"][-1] == [3000, 3.0, 23.0] and records[5]["eval_episodes"] == 5


def test_hp_overrides_reach_both_libraries_and_the_target_table(tmp_path):
    pair = (make_test_double("a", tmp_path / "order.log"), make_test_double("b", tmp_path / "order.log"))
    records, section = compare.compare("sac-pendulum", [0, 1], threads=1, quick=False, pair=pair,
                                       measure_in_graph_floor=False, target_return=12.5,
                                       hp={"total_env_steps": "5000", "log_interval": "500"})
    # The doubles log every 500 env steps to 5000; their training return is 10 * seed + env_step / 1000.
    assert [len(r["curve"]) for r in records] == [10, 10, 10, 10] and records[0]["env_steps"] == 5000
    assert "total_env_steps=5000, log_interval=500" in section and "5000 env steps" in section
    # Seed 0 peaks at 5.0: never 12.5. Seed 1 starts at 10.5 and reaches 12.5 at env step 2500, 2.5 s.
    assert "| 0 | not reached in 5000 (best 5.0) | not reached in 5000 (best 5.0) | - |" in section
    assert "| 1 | 2500 / 2.5 | 2500 / 2.5 | 1.00 |" in section
    assert results_io.time_to_return({"curve": [[10, 1.0, 3.0], [20, 2.5, 7.0], [30, 4.0, 9.0]]}, 7.0) == (20, 2.5)
    with pytest.raises(UsageError, match="sets eval_interval for both libraries"):
        compare.run_specs("sac-pendulum", [0], 1, False, {"eval_interval": "1000"})
    with pytest.raises(UsageError, match="no_such_hparam"):
        compare.run_specs("sac-pendulum", [0], 1, False, {"no_such_hparam": "1"})


def test_a_full_run_refreshes_the_summary_table_of_docs_that_hold_its_markers(tmp_path, monkeypatch):
    pair = (make_test_double("tfrl", tmp_path / "order.log"), make_test_double("SB3", tmp_path / "order.log"))
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# B\n\n<!-- compare:summary start -->\nold\n<!-- compare:summary end -->\n")
    outputs = compare.Outputs(docs=docs, plot=None, results=tmp_path / "results" / "compare-sac-pendulum.jsonl")
    compare.compare("sac-pendulum", [0, 1], threads=1, quick=False, pair=pair, outputs=outputs,
                    measure_in_graph_floor=False, hp={"total_env_steps": "5000", "log_interval": "500"})
    assert "\nold\n" in docs.read_text()  # two seeds: below the summary's three, the old text stays
    compare.compare("sac-pendulum", [2], threads=1, quick=False, pair=pair, outputs=outputs,
                    measure_in_graph_floor=False, hp={"total_env_steps": "5000", "log_interval": "500"})
    text = docs.read_text()
    # Seeds 0-2 over two sittings; the doubles' final returns are 100 + seed: IQM of 100, 101, 102 (none cut).
    assert "| sac-pendulum | Pendulum-v1, 5000 | 0, 1, 2 | 101.0 [" in text and "| not run |" in text
    assert "\nold\n" not in text and text.index("compare:summary start") < text.index("compare:sac-pendulum start")

    # The repository's docs are never rewritten from results kept elsewhere (here: the same files, elsewhere).
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "benchmarks.md").write_text("<!-- compare:summary start -->\nold\n<!-- compare:summary end -->\n")
    monkeypatch.setattr(compare, "REPO_ROOT", repo)
    monkeypatch.setattr(compare, "BENCHMARKS_DIR", repo / "benchmarks")
    compare.refresh_summary(repo / "docs" / "benchmarks.md", tmp_path / "results")
    assert "\nold\n" in (repo / "docs" / "benchmarks.md").read_text()


def _record(library, seed, wall, train, steps_per_s, cpu, rss, ret):
    return {"library": library, "seed": seed, "wall_s": wall, "train_s": train, "env_steps_per_s": steps_per_s,
            "cpu_s": cpu, "peak_rss_mb": rss, "return_mean": ret, "eval_episodes": 100}


def test_summary_table_medians_spreads_and_per_seed_ratios_by_hand():
    records = [
        _record("tfrl", 0, 10, 8, 1000, 9, 600, 100.0),
        _record("tfrl", 1, 20, 16, 3000, 9, 600, 200.0),
        _record("tfrl", 2, 60, 50, 2000, 9, 600, -50.0),
        # Listed out of seed order: pairs are made by seed, not by position.
        _record("SB3", 2, 30, 25, 1000, 9, 300, -100.0),
        _record("SB3", 0, 20, 16, 1000, 3, 300, 150.0),
        _record("SB3", 1, 20, 16, 1000, 4.5, 300, 100.0),
    ]
    rows = compare.summary_table(records, ("tfrl", "SB3")).splitlines()
    # wall: tfrl 10, 20, 60 / SB3 20, 20, 30 per seed = 0.5, 1.0, 2.0.
    assert rows[2] == "| process wall time (s) | 20.0 [10.0, 60.0] | 20.0 [20.0, 30.0] | 1.00 [0.50, 2.00] |"
    assert rows[3] == "| training time (s) | 16.0 [8.0, 50.0] | 16.0 [16.0, 25.0] | 1.00 [0.50, 2.00] |"
    # steps/s: 1000/1000, 3000/1000, 2000/1000 = 1, 3, 2 -> median 2.
    assert rows[4] == "| env steps/s (training) | 2000 [1000, 3000] | 1000 [1000, 1000] | 2.00 [1.00, 3.00] |"
    # CPU: 9/3, 9/4.5, 9/9 = 3, 2, 1.
    assert rows[5] == "| process CPU time, user+sys (s) | 9.0 [9.0, 9.0] | 4.5 [3.0, 9.0] | 2.00 [1.00, 3.00] |"
    assert rows[6] == "| peak RSS (MB) | 600 [600, 600] | 300 [300, 300] | 2.00 [2.00, 2.00] |"
    # Returns: differences per seed 100-150 = -50, 200-100 = 100, -50-(-100) = 50 -> median 50.
    assert rows[7] == ("| greedy return, mean of 100 episodes | 100.0 [-50.0, 200.0] | 100.0 [-100.0, 150.0] "
                       "| tfrl - SB3: 50.0 [-50.0, 100.0] |")
    # IQM of 3 seeds cuts none: the mean, tfrl (100 + 200 - 50) / 3 = 83.3, SB3 50.0, differences 33.3.
    assert rows[8].startswith("| greedy return: IQM [95 % stratified bootstrap CI] over seeds (benchmarks/stats.py) "
                              "| 83.3 [") and "| 50.0 [" in rows[8] and "tfrl - SB3: 33.3 [" in rows[8]
    single = compare.summary_table(records[:1] + records[4:5], ("tfrl", "SB3")).splitlines()
    assert single[2] == "| process wall time (s) | 10.0 | 20.0 | 0.50 |"  # one seed: no spread
    assert single[8].endswith("| 100.0 | 150.0 | tfrl - SB3: -50.0 |")


def test_write_section_replaces_between_the_markers_or_appends(tmp_path):
    docs = tmp_path / "b.md"
    docs.write_text("# B\n<!-- compare:x start -->\nold\n<!-- compare:x end -->\ntail\n"
                    "<!-- compare:y start -->\nkeep\n<!-- compare:y end -->\n")
    results_io.write_section(docs, "x", "new\n")
    results_io.write_section(docs, "x", "newer")  # again: replaced, not duplicated
    assert docs.read_text() == ("# B\n<!-- compare:x start -->\nnewer\n<!-- compare:x end -->\ntail\n"
                                "<!-- compare:y start -->\nkeep\n<!-- compare:y end -->\n")
    results_io.write_section(docs, "z", "appended")
    assert docs.read_text().endswith("<!-- compare:y end -->\n\n<!-- compare:z start -->\nappended\n"
                                     "<!-- compare:z end -->\n")


def test_sb3_dqn_arguments_are_the_zoo_values():
    """The zoo's hyperparams/dqn.yml values, typed from it, against the translation of our -sb3zoo presets."""
    lunar = sb3_runner.dqn_kwargs(compare.run_specs("dqn-lunarlander", [0], 1, False)[0].hparams)
    assert {k: v for k, v in lunar.items() if k != "policy_kwargs"} == dict(
        learning_rate=6.3e-4, buffer_size=50_000, learning_starts=0, batch_size=128, tau=1.0, gamma=0.99,
        train_freq=4, gradient_steps=4,  # the zoo's -1: as many as env steps per train call
        target_update_interval=250, exploration_fraction=0.12, exploration_initial_eps=1.0,
        exploration_final_eps=0.1, max_grad_norm=10.0)
    assert lunar["policy_kwargs"] == {"net_arch": [256, 256], "optimizer_kwargs": {"eps": 1e-8}}  # torch's Adam default
    cartpole = sb3_runner.dqn_kwargs(compare.run_specs("dqn-cartpole", [0], 1, False)[0].hparams)
    assert {k: cartpole[k] for k in ("learning_rate", "buffer_size", "learning_starts", "batch_size", "train_freq",
                                     "gradient_steps", "target_update_interval", "exploration_fraction",
                                     "exploration_final_eps")} == dict(
        learning_rate=2.3e-3, buffer_size=100_000, learning_starts=1000, batch_size=64, train_freq=256,
        gradient_steps=128, target_update_interval=10, exploration_fraction=0.16, exploration_final_eps=0.04)
    assert compare.run_specs("dqn-cartpole", [0], 1, False)[0].hparams["total_env_steps"] == 50_000
    with pytest.raises(UsageError, match="double_dqn"):
        sb3_runner.dqn_kwargs({**compare.run_specs("dqn-cartpole", [0], 1, False)[0].hparams, "double_dqn": True})
    with pytest.raises(UsageError, match="layer_init=torch"):  # Keras' Glorot init is not what SB3 trains
        sb3_runner.dqn_kwargs({**compare.run_specs("dqn-cartpole", [0], 1, False)[0].hparams, "layer_init": "glorot"})


def test_sb3_ppo_arguments_are_the_zoo_values(monkeypatch):
    # torch is not a test dependency: a stand-in names the activation class the runner would pass.
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(nn=types.SimpleNamespace(Tanh="Tanh", ReLU="ReLU")))
    lunar = sb3_runner.ppo_kwargs(compare.run_specs("ppo-lunarlander", [0], 1, False)[0].hparams)
    assert {k: v for k, v in lunar.items() if k != "policy_kwargs"} == dict(
        learning_rate=3e-4, n_steps=1024, batch_size=64, n_epochs=4, gamma=0.999, gae_lambda=0.98, clip_range=0.2,
        ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, normalize_advantage=True)
    assert lunar["policy_kwargs"] == {"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": "Tanh",
                                      "optimizer_kwargs": {"eps": 1e-5}}
    assert compare.run_specs("ppo-lunarlander", [0], 1, False)[0].hparams["num_envs"] == 16
    cartpole = sb3_runner.ppo_kwargs(compare.run_specs("ppo-cartpole", [0], 1, False)[0].hparams)
    # Linear schedules: SB3 calls them with the progress remaining, 1 at the start and 0 at the end.
    assert (cartpole["learning_rate"](1.0), cartpole["learning_rate"](0.25)) == (1e-3, 2.5e-4)
    assert (cartpole["clip_range"](1.0), cartpole["clip_range"](0.5)) == (0.2, 0.1)
    assert (cartpole["n_steps"], cartpole["batch_size"], cartpole["n_epochs"]) == (32, 256, 20)
    with pytest.raises(UsageError, match="no shared actor-critic torso"):
        sb3_runner.ppo_kwargs({**compare.run_specs("ppo-cartpole", [0], 1, False)[0].hparams, "shared_torso": True})
    # Normalization is SB3's VecNormalize (a stand-in here), with tfrl's clips and gamma; without it, the env as is.
    class VecNormalize:
        def __init__(self, env, **kwargs):
            self.env, self.kwargs = env, kwargs

        def normalize_obs(self, obs):
            return obs

    vec_env_module = types.SimpleNamespace(VecNormalize=VecNormalize)
    monkeypatch.setitem(sys.modules, "stable_baselines3.common.vec_env", vec_env_module)
    plain = compare.run_specs("ppo-pendulum", [0], 1, False)[0].hparams
    assert sb3_runner.vec_normalize("env", plain)[0] == "env"
    wrapped, normalize = sb3_runner.vec_normalize("env", {**plain, "normalize_observations": True})
    assert wrapped.kwargs == dict(norm_obs=True, norm_reward=False, clip_obs=10.0, clip_reward=10.0, gamma=0.9)
    assert normalize == wrapped.normalize_obs
    pendulum = sb3_runner.ppo_kwargs(compare.run_specs("ppo-pendulum", [0], 1, False)[0].hparams)
    assert (pendulum["n_steps"], pendulum["gamma"], pendulum["gae_lambda"], pendulum["n_epochs"]) == (1024, 0.9, 0.95, 10)


def test_sb3_a2c_arguments_are_the_zoo_values(monkeypatch):
    torch = types.SimpleNamespace(nn=types.SimpleNamespace(Tanh="Tanh", ReLU="ReLU"),
                                  optim=types.SimpleNamespace(RMSprop="RMSprop"))
    monkeypatch.setitem(sys.modules, "torch", torch)
    lunar = sb3_runner.a2c_kwargs(compare.run_specs("a2c-lunarlander", [0], 1, False)[0].hparams)
    # lin_0.00083: SB3 calls the schedule with the progress remaining, 1 at the start and 0 at the end.
    assert (lunar["learning_rate"](1.0), lunar["learning_rate"](0.5)) == (0.00083, 0.000415)
    assert (lunar["n_steps"], lunar["gamma"], lunar["ent_coef"], lunar["normalize_advantage"]) == (5, 0.995, 1e-5, False)
    assert lunar["policy_kwargs"]["optimizer_kwargs"] == {"alpha": 0.99, "eps": 1e-5, "weight_decay": 0}
    cartpole = sb3_runner.a2c_kwargs(compare.run_specs("a2c-cartpole", [0], 1, False)[0].hparams)
    assert isinstance(cartpole["learning_rate"], float)  # a constant schedule is SB3's plain number


def test_recurrent_ppo_arguments_are_the_zoo_ppo_lstm_values(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(nn=types.SimpleNamespace(Tanh="Tanh", ReLU="ReLU")))
    hp = compare.run_specs("ppo-lstm-cartpolenovel", [0], 1, False)[0].hparams
    kwargs = sb3_runner.recurrent_ppo_kwargs(hp)
    assert kwargs["policy_kwargs"]["lstm_hidden_size"] == 64 and kwargs["policy_kwargs"]["enable_critic_lstm"]
    assert kwargs["policy_kwargs"]["ortho_init"] is False and kwargs["policy_kwargs"]["net_arch"] == dict(pi=[64], vf=[64])
    assert (kwargs["n_steps"], kwargs["batch_size"], kwargs["n_epochs"], kwargs["gamma"]) == (32, 256, 20, 0.98)
    assert hp["normalize_observations"] and hp["activation"] == "relu"
    assert hp["hidden_sizes"] == [] and hp["post_lstm_sizes"] == [64]  # MlpLstmPolicy: the LSTM, then net_arch
    with pytest.raises(UsageError, match="RecurrentPPO cuts its minibatches"):
        sb3_runner.recurrent_ppo_kwargs({**hp, "sequence_length": 16})
    with pytest.raises(UsageError, match="no layers before its LSTM"):
        sb3_runner.recurrent_ppo_kwargs({**hp, "hidden_sizes": [64]})


def test_sb3_sac_arguments_are_the_zoo_values():
    pendulum = sb3_runner.sac_kwargs(compare.run_specs("sac-pendulum", [0], 1, False)[0].hparams)
    assert pendulum == dict(
        learning_rate=1e-3, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005, gamma=0.99,
        train_freq=64, gradient_steps=64,  # the zoo's 1 and 1, made 64 at a time (the same replay ratio)
        ent_coef="auto_1.0", target_entropy="auto", policy_kwargs={"net_arch": [256, 256]})
    lunar = compare.run_specs("sac-lunarlandercontinuous", [0], 1, False)[0].hparams
    assert (lunar["total_env_steps"], lunar["learning_starts"], lunar["batch_size"]) == (500_000, 1000, 256)
    walker = sb3_runner.sac_kwargs(compare.run_specs("sac-bipedalwalker", [0], 1, False)[0].hparams)
    assert walker == dict(
        learning_rate=7.3e-4, buffer_size=300_000, learning_starts=10_000, batch_size=256, tau=0.02, gamma=0.98,
        train_freq=64, gradient_steps=64, ent_coef="auto_1.0", target_entropy="auto",
        policy_kwargs={"net_arch": [400, 300]})
    for bad, message in [({"max_grad_norm": 1.0}, "does not clip"), ({"train_in_background": True}, "background"),
                         ({"normalize_observations": True}, "normalize_observations=false")]:
        with pytest.raises(UsageError, match=message):
            sb3_runner.sac_kwargs({**compare.run_specs("sac-pendulum", [0], 1, False)[0].hparams, **bad})


def _normal_action_noise_stand_in(monkeypatch):
    """stable_baselines3 is not a test dependency: a stand-in NormalActionNoise gives back what it was built with."""
    noise = types.SimpleNamespace(NormalActionNoise=lambda mean, sigma: ("normal", list(mean), list(sigma)))
    monkeypatch.setitem(sys.modules, "stable_baselines3.common.noise", noise)


def test_sb3_td3_arguments_are_the_zoo_mujoco_values(monkeypatch):
    _normal_action_noise_stand_in(monkeypatch)
    # hyperparams/td3.yml, HalfCheetah-v4 (&mujoco-defaults): learning_starts 10000, noise_type normal, noise_std 0.1,
    # train_freq 1, gradient_steps 1, learning_rate 1e-3, batch_size 256, net_arch [400, 300]; SB3's TD3 defaults
    # for the rest. HalfCheetah acts in 6 dimensions: the noise is N(0, 0.1) in each.
    cheetah = sb3_runner.td3_kwargs(compare.run_specs("td3-halfcheetah", [0], 1, False)[0].hparams, 6)
    assert cheetah == dict(
        learning_rate=1e-3, buffer_size=1_000_000, learning_starts=10_000, batch_size=256, tau=0.005, gamma=0.99,
        train_freq=64, gradient_steps=64,  # the zoo's 1 and 1, made 64 at a time (the same replay ratio)
        policy_delay=2, target_policy_noise=0.2, target_noise_clip=0.5,
        action_noise=("normal", [0.0] * 6, [0.1] * 6), policy_kwargs={"net_arch": [400, 300]})
    hopper_hp = compare.run_specs("td3-hopper", [0], 1, False)[0].hparams
    assert hopper_hp["total_env_steps"] == 1_000_000  # the zoo's budget, which the benchmark tables cut
    changed = {**hopper_hp, "exploration_noise": 0.3, "policy_delay": 3, "target_policy_noise": 0.1,
               "target_noise_clip": 0.25, "target_update_tau": 0.01}
    hopper = sb3_runner.td3_kwargs(changed, 3)
    assert hopper["action_noise"] == ("normal", [0.0] * 3, [0.3] * 3)
    assert (hopper["policy_delay"], hopper["target_policy_noise"], hopper["target_noise_clip"], hopper["tau"]) == (
        3, 0.1, 0.25, 0.01)
    for bad, message in [({"max_grad_norm": 1.0}, "SB3's TD3 does not clip"),
                         ({"train_in_background": True}, "background"),
                         ({"normalize_observations": True}, "normalize_observations=false"),
                         ({"num_envs": 2}, "num_envs=1")]:
        with pytest.raises(UsageError, match=message):
            sb3_runner.td3_kwargs({**hopper_hp, **bad}, 3)


def test_the_mujoco_suites_train_the_zoo_settings_on_v5(monkeypatch):
    """Each MuJoCo suite's preset against the zoo's values, typed from hyperparams/{sac,td3,ppo}.yml (the -v4
    entries), and their SB3 translation for one env of each kind."""
    off_policy = {  # the zoo's MuJoCo defaults, the same for the four envs; 64 env steps per train call in tfrl
        "sac": dict(total_env_steps=1_000_000, learning_starts=10_000, learning_rate=3e-4, batch_size=256,
                    hidden_sizes=[256, 256], train_period_env_steps=64, gradient_steps_per_train=64),
        "td3": dict(total_env_steps=1_000_000, learning_starts=10_000, learning_rate=1e-3, batch_size=256,
                    hidden_sizes=[400, 300], exploration_noise=0.1, train_period_env_steps=64,
                    gradient_steps_per_train=64),
    }
    ppo = {  # rollout_length = n_steps, value_coef = vf_coef, entropy_coef = ent_coef; normalize: true
        "halfcheetah": dict(rollout_length=512, batch_size=64, n_epochs=20, gamma=0.98, gae_lambda=0.92,
                            learning_rate=2.0633e-05, entropy_coef=0.000401762, clip_range=0.1, max_grad_norm=0.8,
                            value_coef=0.58096, activation="relu", hidden_sizes=[256, 256], log_std_init=-2.0,
                            layer_init="torch"),  # policy_kwargs: log_std_init=-2, ortho_init=False
        "hopper": dict(rollout_length=512, batch_size=32, n_epochs=5, gamma=0.999, gae_lambda=0.99,
                       learning_rate=9.80828e-05, entropy_coef=0.00229519, clip_range=0.2, max_grad_norm=0.7,
                       value_coef=0.835671, activation="relu", hidden_sizes=[256, 256], log_std_init=-2.0,
                       layer_init="torch"),
        "walker2d": dict(rollout_length=512, batch_size=32, n_epochs=20, gamma=0.99, gae_lambda=0.95,
                         learning_rate=5.05041e-05, entropy_coef=0.000585045, clip_range=0.1, max_grad_norm=1.0,
                         value_coef=0.871923, activation="tanh", hidden_sizes=[64, 64]),
        "ant": dict(rollout_length=2048, batch_size=64, n_epochs=10, gamma=0.99, gae_lambda=0.95, learning_rate=3e-4,
                    entropy_coef=0.0, clip_range=0.2, max_grad_norm=0.5, value_coef=0.5, activation="tanh",
                    hidden_sizes=[64, 64]),
    }
    env_ids = {"halfcheetah": "HalfCheetah-v5", "hopper": "Hopper-v5", "walker2d": "Walker2d-v5", "ant": "Ant-v5"}
    for env, env_id in env_ids.items():
        for agent in ("sac", "td3", "ppo"):
            spec = compare.run_specs(f"{agent}-{env}", [0], 1, False)[0]
            assert (spec.agent, spec.env_id, spec.preset) == (agent, env_id, f"{agent}-{env}-sb3zoo")
            expected = off_policy.get(agent) or dict(
                total_env_steps=1_000_000, num_envs=1, normalize_observations=True, normalize_rewards=True,
                **ppo[env])
            assert {key: spec.hparams[key] for key in expected} == expected, f"{agent}-{env}"
    sac = sb3_runner.sac_kwargs(compare.run_specs("sac-walker2d", [0], 1, False)[0].hparams)
    assert sac == dict(learning_rate=3e-4, buffer_size=1_000_000, learning_starts=10_000, batch_size=256, tau=0.005,
                       gamma=0.99, train_freq=64, gradient_steps=64, ent_coef="auto_1.0", target_entropy="auto",
                       policy_kwargs={"net_arch": [256, 256]})
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(nn=types.SimpleNamespace(Tanh="Tanh", ReLU="ReLU")))
    cheetah = sb3_runner.ppo_kwargs(compare.run_specs("ppo-halfcheetah", [0], 1, False)[0].hparams)
    assert cheetah == dict(
        learning_rate=2.0633e-05, n_steps=512, batch_size=64, n_epochs=20, gamma=0.98, gae_lambda=0.92,
        clip_range=0.1, ent_coef=0.000401762, vf_coef=0.58096, max_grad_norm=0.8, normalize_advantage=True,
        policy_kwargs={"net_arch": {"pi": [256, 256], "vf": [256, 256]}, "activation_fn": "ReLU",
                       "optimizer_kwargs": {"eps": 1e-5}, "ortho_init": False, "log_std_init": -2.0})


def test_quick_off_policy_suites_take_gradient_steps():
    # --quick must exercise training: learning_starts (the MuJoCo presets' 10000) below --quick's 2000 env steps.
    for name, suite in compare.SUITES.items():
        if suite.agent in ("dqn", "sac", "td3"):
            hp = compare.run_specs(name, [0], 1, True)[0].hparams
            first_train = max(hp["learning_starts"], hp["train_period_env_steps"])
            assert first_train < hp["total_env_steps"], name
    assert compare.run_specs("td3-hopper", [0], 1, True)[0].overrides == {
        "eval_interval": 0, "checkpoint_interval": 0, "total_env_steps": 2000, "learning_starts": 1000,
        "log_interval": 500, "final_eval_episodes": 5}


def test_the_td3_floor_times_td3s_train_step(tmp_path):
    # A small TD3 spec (the real suite's step takes seconds per call): calls at env steps 1000, 1100, ..., 2000 are
    # (2000 - 1000) // 100 + 1 = 11, of K = 4 gradient steps each: 44 in the run.
    spec = compare.run_specs("td3-halfcheetah", [0], 1, True, {
        "hidden_sizes": "8", "batch_size": "4", "train_period_env_steps": "100", "gradient_steps_per_train": "4",
        "total_env_steps": "2000", "learning_starts": "1000"})[0]
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(dataclasses.asdict(spec)))
    completed = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "compare.py"), f"--measure_floor={path}",
                                "--floor_calls=1", "--floor_repeats=1"], capture_output=True, text=True, timeout=120,
                               env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"},
                               cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-2000:]
    floor = json.loads(completed.stdout.strip().splitlines()[-1])
    assert floor["steps_per_call"] == 4 and floor["run_gradient_steps"] == 44 and floor["ms_per_step"] > 0
    # HalfCheetah-v5's model sets a deprecated attribute: the env is made as tfrl makes it, which logs MuJoCo's
    # warning (at debug level) instead of printing it and appending it to MUJOCO_LOG.TXT in the working dir.
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists() and "settotalmass" not in completed.stderr


def _run_compare_cli(args, hide="stable_baselines3"):
    """compare.py as a user runs it, with `hide` unimportable whether or not it is installed."""
    code = (f"import runpy, sys; sys.modules[{hide!r}] = None; "
            f"sys.argv = ['compare.py', *{list(args)!r}]; "
            f"runpy.run_path({str(REPO_ROOT / 'benchmarks' / 'compare.py')!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def test_cli_without_sb3_exits_2_naming_the_bench_extra(tmp_path):
    completed = _run_compare_cli(["--suite=a2c-cartpole", "--quick", f"--docs={tmp_path / 'b.md'}"])
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.strip().splitlines()[-1].startswith("compare.py: error: ")
    assert "stable_baselines3" in completed.stderr and "pip install 'tfrl[bench]'" in completed.stderr
    assert "Traceback" not in completed.stderr and not (tmp_path / "b.md").exists()
    bad_suite = _run_compare_cli(["--suite=ppo-pong"])
    assert bad_suite.returncode == 2 and "unknown suite 'ppo-pong'" in bad_suite.stderr
    bad_hp = _run_compare_cli(["--suite=sac-pendulum", "--hp=batch_size=big", f"--docs={tmp_path / 'b.md'}"])
    assert bad_hp.returncode == 2 and "batch_size" in bad_hp.stderr.strip().splitlines()[-1]
    assert "Traceback" not in bad_hp.stderr and not (tmp_path / "b.md").exists()


def test_the_masked_suite_gives_maskable_ppo_the_observation_without_its_mask(tmp_path):
    import gymnasium as gym
    import numpy as np

    env = sb3_runner.without_mask(gym.make("tfrl/MaskedPick-v0"))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (10,) and np.array_equal(obs, env.unwrapped._states[0])  # the payoffs only
    assert sb3_runner.without_mask_keys("tfrl/MaskedPick-v0") == ["state"]
    assert sb3_runner.has_action_masks("tfrl/MaskedPick-v0") and not sb3_runner.has_action_masks("CartPole-v1")
    spec = compare.run_specs("ppo-maskedpick", [0], 1, False)[0]
    assert (spec.hparams["num_envs"], spec.hparams["rollout_length"], spec.hparams["n_epochs"]) == (8, 256, 10)
    completed = _run_compare_cli(["--suite=ppo-maskedpick", "--quick", f"--docs={tmp_path / 'b.md'}"],
                                 hide="sb3_contrib")
    assert completed.returncode == 2 and "sb3_contrib" in completed.stderr, completed.stderr
    assert "Traceback" not in completed.stderr and not (tmp_path / "b.md").exists()


# --- a third library: SBX -------------------------------------------------------------------------------------

def test_three_libraries_alternate_a_b_c_and_each_other_gets_its_ratio_and_difference(tmp_path):
    order_log = tmp_path / "order.log"
    trio = tuple(make_test_double(name, order_log) for name in ("a", "b", "c"))
    records, section = compare.compare("sac-pendulum", [0, 1], threads=1, quick=False, pair=trio,
                                       measure_in_graph_floor=False, target_return=12.5,
                                       hp={"total_env_steps": "5000", "log_interval": "500"})
    assert order_log.read_text().split("\n")[:-1] == ["a 0", "b 0", "c 0", "a 1", "b 1", "c 1"]
    assert "### sac-pendulum: a against b and c" in section
    assert "| metric | a | b | c | a/b per seed | a/c per seed |" in section
    # The doubles train alike (1000 env steps/s, return 100 + seed): every ratio 1, every difference 0.
    assert ("| training time (s) | 5.0 [5.0, 5.0] | 5.0 [5.0, 5.0] | 5.0 [5.0, 5.0] | 1.00 [1.00, 1.00] "
            "| 1.00 [1.00, 1.00] |") in section
    assert "| a - b: 0.0 [0.0, 0.0] | a - c: 0.0 [0.0, 0.0] |" in section
    assert "| 1 | 2500 / 2.5 | 2500 / 2.5 | 2500 / 2.5 | 1.00 | 1.00 |" in section


def test_libs_are_tfrl_first_then_others_each_once():
    assert compare.runners(["tfrl", "sb3", "SBX"]) == (compare.TFRL, compare.SB3, compare.SBX)
    for libs, message in [(["sb3", "tfrl"], "tfrl first"), (["tfrl"], "one or more others"),
                          (["tfrl", "sb3", "sb3"], "each once"), (["tfrl", "rllib"], "unknown rllib")]:
        with pytest.raises(UsageError, match=message):
            compare.runners(libs)


def test_cli_without_sbx_exits_2_naming_the_bench_jax_extra(tmp_path):
    completed = _run_compare_cli(["--suite=sac-pendulum", "--quick", "--libs=tfrl,sb3,sbx",
                                  f"--docs={tmp_path / 'b.md'}"], hide="sbx")
    assert completed.returncode == 2, completed.stderr
    assert "sbx" in completed.stderr and "pip install 'tfrl[bench-jax]'" in completed.stderr
    assert "Traceback" not in completed.stderr and not (tmp_path / "b.md").exists()


def test_sbx_arguments_are_sb3s_translation_adapted_where_sbx_differs(monkeypatch):
    # Neither optax nor flax is a test dependency: stand-ins record what the runner builds.
    optax = types.SimpleNamespace(clip_by_global_norm=lambda norm: ("clip", norm),
                                  adam=lambda learning_rate, eps: ("adam", learning_rate, eps),
                                  chain=lambda *parts: parts)
    monkeypatch.setitem(sys.modules, "optax", optax)
    linen = types.SimpleNamespace(tanh="flax tanh", relu="flax relu")
    monkeypatch.setitem(sys.modules, "flax", types.SimpleNamespace(linen=linen))
    monkeypatch.setitem(sys.modules, "flax.linen", linen)
    dqn_hp = compare.run_specs("dqn-cartpole", [0], 1, False)[0].hparams
    dqn = sb3_runner.sbx_kwargs("dqn", dqn_hp)
    assert "max_grad_norm" not in dqn and dqn["learning_rate"] == 2.3e-3 and dqn["gradient_steps"] == 128
    optimizer = dqn["policy_kwargs"]["optimizer_class"]
    # SB3's clip (10) in front of Adam with torch's epsilon, at the learning rate SBX passes in.
    assert optimizer(learning_rate=0.5) == (("clip", 10.0), ("adam", 0.5, 1e-8))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(nn=types.SimpleNamespace(Tanh="Tanh", ReLU="ReLU")))
    ppo_hp = compare.run_specs("ppo-pendulum", [0], 1, False)[0].hparams
    ppo = sb3_runner.sbx_kwargs("ppo", ppo_hp)
    assert ppo["policy_kwargs"]["activation_fn"] == "flax tanh" and ppo["policy_kwargs"]["ortho_init"] is True
    cheetah = sb3_runner.sbx_kwargs("ppo", compare.run_specs("ppo-halfcheetah", [0], 1, False)[0].hparams)
    assert cheetah["policy_kwargs"]["ortho_init"] is False and cheetah["policy_kwargs"]["log_std_init"] == -2.0
    assert {k: v for k, v in ppo.items() if k != "policy_kwargs"} == {
        k: v for k, v in sb3_runner.ppo_kwargs(ppo_hp).items() if k != "policy_kwargs"}
    sac_hp = compare.run_specs("sac-pendulum", [0], 1, False)[0].hparams
    assert sb3_runner.sbx_kwargs("sac", sac_hp) == sb3_runner.sac_kwargs(sac_hp)
    _normal_action_noise_stand_in(monkeypatch)
    td3_hp = compare.run_specs("td3-ant", [0], 1, False)[0].hparams
    td3 = sb3_runner.sbx_kwargs("td3", td3_hp, 8)  # Ant acts in 8 dimensions
    assert td3 == sb3_runner.td3_kwargs(td3_hp, 8) and td3["action_noise"] == ("normal", [0.0] * 8, [0.1] * 8)
    with pytest.raises(UsageError, match="not a2c"):
        sb3_runner.sbx_kwargs("a2c", compare.run_specs("a2c-cartpole", [0], 1, False)[0].hparams)


# --- --reuse: a comparison grown over several sittings ---------------------------------------------------------

def test_reuse_runs_only_the_seeds_not_recorded_with_the_same_settings(tmp_path):
    order_log, results = tmp_path / "order.log", tmp_path / "runs.jsonl"
    pair = (make_test_double("a", order_log), make_test_double("b", order_log))
    hp = {"total_env_steps": "5000", "log_interval": "500"}
    outputs = compare.Outputs(results=results)
    compare.compare("sac-pendulum", [0, 1], 1, False, pair, outputs, measure_in_graph_floor=False, hp=hp)
    # Seed 1 lost b's run (an interrupted sitting): it must run again for both, side by side.
    lines = results.read_text().splitlines()
    results.write_text("\n".join(lines[:3]) + "\n")
    # Runs that differ in one setting are never reused: other hyperparameters, threads, --quick.
    other = {**hp, "total_env_steps": "6000"}
    compare.compare("sac-pendulum", [2], 1, False, pair, outputs, measure_in_graph_floor=False, hp=other)
    compare.compare("sac-pendulum", [2], 2, False, pair, outputs, measure_in_graph_floor=False, hp=hp)
    compare.compare("sac-pendulum", [3], 1, True, pair, outputs, measure_in_graph_floor=False)
    order_log.write_text("")

    records, section = compare.compare("sac-pendulum", [0, 1, 2, 3], 1, False, pair, outputs,
                                       measure_in_graph_floor=False, hp=hp, reuse=True)
    assert order_log.read_text().split("\n")[:-1] == ["a 1", "b 1", "a 2", "b 2", "a 3", "b 3"]
    assert [(r["library"], r["seed"]) for r in records] == [
        ("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3), ("b", 3)]
    assert records[0] == json.loads(lines[0]) and records[0]["hparams"]["total_env_steps"] == 5000
    assert records[0]["cpu"] == compare.cpu_model()
    cpu, stamp = re.escape(compare.cpu_model()), r"\d{4}-\d\d-\d\d \d\d:\d\d UTC"
    assert re.search(rf"^Runs: seed 0 ran {stamp} on {cpu} \(recorded, reused\); seeds 1, 2, 3 ran {stamp} on "
                     rf"{cpu} \(this run\)\. Each seed's libraries ran side by side, alternated\.$", section, re.M)
    assert "seeds 0, 1, 2, 3;" in section  # the settings line names every seed of the table
    # Now every seed is recorded: nothing runs, and the table is the same.
    order_log.write_text("")
    again, section_again = compare.compare("sac-pendulum", [0, 1, 2, 3], 1, False, pair, outputs,
                                           measure_in_graph_floor=False, hp=hp, reuse=True)
    assert order_log.read_text() == "" and again == json.loads(json.dumps(records))
    assert "(this run)" not in section_again and "Nothing ran again: this invocation (" in section_again


def test_reuse_refuses_a_results_file_that_is_not_run_records_and_quick_runs(tmp_path):
    results = tmp_path / "runs.jsonl"
    results.write_text('{"suite": "sac-pendulum", "library": "a", "seed": 0, "threads": 1, "started": "x", '
                       '"env_id": "Pendulum-v1", "return_mean": -150.0}\nnot json\n')
    specs = compare.run_specs("sac-pendulum", [0], 1, False)
    with pytest.raises(UsageError, match=r"runs\.jsonl:2: not a compare\.py run record"):
        compare.recorded_runs(results, specs, ("a", "b"))
    completed = _run_compare_cli(["--suite=sac-pendulum", "--quick", "--reuse", f"--docs={tmp_path / 'b.md'}"])
    assert completed.returncode == 2 and "--reuse joins full runs only" in completed.stderr, completed.stderr
    assert "Traceback" not in completed.stderr and not (tmp_path / "b.md").exists()
