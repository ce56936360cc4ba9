"""Test double of a library for benchmarks/compare.py (tests/benchmarks/test_compare.py): trains nothing.

    python tests/compare_test_double_runner.py --run_dir=RUN/run --name=double --order_log=FILE

Reads the spec compare.py wrote to RUN/spec.json and writes RUN/run/metrics.jsonl in tfrl's shape with
numbers the tests know: a "train" record every log_interval env steps with wall_time_s = env_step / 1000
(so 1000 env steps/s) and episode_return_mean = 10 * seed + env_step / 1000, then a "final_eval" record
with return_mean = 100 + seed, return_std = 5 over final_eval_episodes. Appends "<name> <seed>" to
--order_log, so a test sees the order in which compare.py started its runs. Leaves a file in its working
directory, as MuJoCo leaves MUJOCO_LOG.TXT (CWD_LITTER).
"""

import argparse
import json
import pathlib

CWD_LITTER = "double-was-here.txt"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--run_dir", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--order_log", required=True)
    args = parser.parse_args()
    run_dir = pathlib.Path(args.run_dir)
    pathlib.Path(CWD_LITTER).write_text("a file a library writes into its working directory\n")
    spec = json.loads((run_dir.parent / "spec.json").read_text())
    hp, seed = spec["hparams"], spec["seed"]
    with open(args.order_log, "a") as log:
        log.write(f"{args.name} {seed}\n")
    run_dir.mkdir(parents=True)
    records = [{"kind": "train", "env_step": step, "wall_time_s": step / 1000, "env_steps_per_s": 1000.0,
                "episodes": 1, "episode_return_mean": 10 * seed + step / 1000}
               for step in range(hp["log_interval"], hp["total_env_steps"] + 1, hp["log_interval"])]
    records.append({"kind": "final_eval", "env_step": hp["total_env_steps"], "wall_time_s": 99.0,
                    "return_mean": 100.0 + seed, "return_std": 5.0, "episodes": hp["final_eval_episodes"]})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


if __name__ == "__main__":
    main()
