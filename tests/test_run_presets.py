"""benchmarks/run_presets.py: the training rate it reports for a run, from the run's train records."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))

from run_presets import training_rate  # noqa: E402


def test_training_rate_is_the_env_steps_over_the_seconds_of_every_interval_not_the_mean_of_the_rates():
    # 10000 random steps at 5000/s (2 s), then 20000 training steps at 250/s (80 s), then 20000 at 200/s (100 s):
    # 50000 steps in 182 s = 274.7/s. The mean of the three rates would say 1816.7/s.
    records = [{"env_step": 10000, "env_steps_per_s": 5000.0}, {"env_step": 30000, "env_steps_per_s": 250.0},
               {"env_step": 50000, "env_steps_per_s": 200.0}]
    assert training_rate(records) == 275


def test_training_rate_skips_a_record_at_the_step_of_the_one_before_and_is_0_without_records():
    # The second record covers no steps (its rate is 0): 1000 steps in 4 s + 3000 in 6 s = 400/s.
    records = [{"env_step": 1000, "env_steps_per_s": 250.0}, {"env_step": 1000, "env_steps_per_s": 0.0},
               {"env_step": 4000, "env_steps_per_s": 500.0}]
    assert training_rate(records) == 400
    assert training_rate([]) == 0
