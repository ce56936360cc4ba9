#!/usr/bin/env bash
# GPU against the same host's CPUs (CUDA_VISIBLE_DEVICES=), one phase per call on a machine with an NVIDIA GPU
# and TensorFlow with CUDA (../shared/gpu/build_bundle.sh; docs/hardware.md). Runs one after another, never side
# by side; GPU and CPU alternate. Logs go to $OUT (or ./gpu-logs).
#
#   bash benchmarks/gpu_vs_cpu.sh checks   # the doctor, every placement on a GPU machine, the train steps
#   bash benchmarks/gpu_vs_cpu.sh runs     # the headline, PPO LunarLander (200k), DQN Catch, SAC Pendulum
#   bash benchmarks/gpu_vs_cpu.sh essentials   # in about 5 minutes: the doctor, --device=cpu with and without XLA,
#                                              # the train steps on the GPU, the headline and PPO on both
#   bash benchmarks/gpu_vs_cpu.sh lease        # about 6 minutes, most telling first: the doctor, --device=cpu with
#                                              # and without XLA, PPO on both, the train steps on both, the headline
#                                              # (lease1 and lease2: its two halves, for two shorter calls)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-logs}; mkdir -p "$OUT"; export PYTHONPATH=$PWD:${PYTHONPATH:-} TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-1}
RUNS=${RUNS:-/tmp/gpu-runs}; mkdir -p "$RUNS"
train() { python3 -m tfrl train --export_base_path= "$@"; }
timed() {  # timed LABEL COMMAND...: prints the label, the command's last lines and its wall time
  local label=$1; shift; local start=$SECONDS
  echo "=== $label: $*"
  "$@" > "$RUNS/$label.log" 2>&1; local rc=$?
  grep -E "placement:|XLA:|precision:|final evaluation|best policy|kept|Error|error:" "$RUNS/$label.log" | tail -8
  echo "=== $label: rc=$rc wall=$((SECONDS - start)) s"
}
cpu() { CUDA_VISIBLE_DEVICES= "$@"; }
TINY=(--agent=dqn --env=CartPole-v1 --hp=total_env_steps=2000 --hp=learning_starts=500 --hp=eval_interval=0
      --hp=final_eval_episodes=2 --hp=checkpoint_interval=0 --hp=keep_best_policy=false)
machine() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  lscpu | grep -E "Model name|^CPU\(s\)"
  python3 -m tfrl doctor
}

checks() {
  machine
  local tiny=("${TINY[@]}")
  timed place-auto train "${tiny[@]}" --run_dir="$RUNS/p-auto"
  timed place-cpu-xla train "${tiny[@]}" --run_dir="$RUNS/p-cpu-xla" --device=cpu --xla
  timed place-cpu-noxla train "${tiny[@]}" --run_dir="$RUNS/p-cpu-noxla" --device=cpu --noxla
  timed place-gpu0 train "${tiny[@]}" --run_dir="$RUNS/p-gpu0" --device=gpu:0
  timed place-no-gpus train "${tiny[@]}" --run_dir="$RUNS/p-no-gpus" --visible_gpus=
  timed place-one-device train "${tiny[@]}" --run_dir="$RUNS/p-one-device" --strategy=one_device
  timed place-notf32 train "${tiny[@]}" --run_dir="$RUNS/p-notf32" --notf32
  local steps=(--calls=20 --repeats=3 --warmup_calls=5)
  (cd benchmarks && python3 precision_xla.py --agents=dqn,a2c,sac,dqn_cnn --combos=float32:off,float32:on,mixed_bfloat16:on "${steps[@]}") 2>&1 | grep "^|"
  (cd benchmarks && cpu python3 precision_xla.py --agents=dqn,a2c,sac,dqn_cnn --combos=float32:off,float32:on,mixed_bfloat16:off "${steps[@]}") 2>&1 | grep "^|"
  (cd benchmarks && python3 precision_xla.py --agents=ppo_lunarlander --combos=float32:off,float32:on --calls=3 --repeats=3 --warmup_calls=1) 2>&1 | grep "^|"
  (cd benchmarks && cpu python3 precision_xla.py --agents=ppo_lunarlander --combos=float32:off,float32:on --calls=3 --repeats=3 --warmup_calls=1) 2>&1 | grep "^|"
}

runs() {
  timed headline-gpu train --agent=dqn --env=LunarLander-v2 --run_dir="$RUNS/headline-gpu"
  timed headline-cpu cpu train --agent=dqn --env=LunarLander-v2 --run_dir="$RUNS/headline-cpu"
  local ppo=(--agent=ppo --env=LunarLander-v2 --hp=total_env_steps=200000)
  timed ppo-gpu train "${ppo[@]}" --run_dir="$RUNS/ppo-gpu"
  timed ppo-cpu cpu train "${ppo[@]}" --run_dir="$RUNS/ppo-cpu"
  timed ppo-cpu-xla cpu train "${ppo[@]}" --run_dir="$RUNS/ppo-cpu-xla" --xla
  timed catch-gpu train --agent=dqn --env=tfrl/Catch-v0 --run_dir="$RUNS/catch-gpu"
  timed catch-cpu cpu train --agent=dqn --env=tfrl/Catch-v0 --run_dir="$RUNS/catch-cpu"
  timed sac-gpu train --agent=sac --env=Pendulum-v1 --run_dir="$RUNS/sac-gpu"
  timed sac-cpu cpu train --agent=sac --env=Pendulum-v1 --run_dir="$RUNS/sac-cpu"
  for run in "$RUNS"/*/result.json; do echo "$run: $(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))" "$run")"; done
}

essentials() {
  machine
  local tiny=("${TINY[@]}")
  timed place-cpu-xla train "${tiny[@]}" --run_dir="$RUNS/p-cpu-xla" --device=cpu --xla
  timed place-cpu-noxla train "${tiny[@]}" --run_dir="$RUNS/p-cpu-noxla" --device=cpu --noxla
  (cd benchmarks && python3 precision_xla.py --agents=dqn,a2c,sac,dqn_cnn --combos=float32:off,float32:on \
    --calls=20 --repeats=3 --warmup_calls=5) 2>&1 | grep "^|"
  (cd benchmarks && python3 precision_xla.py --agents=ppo_lunarlander --combos=float32:on --calls=3 --repeats=3 \
    --warmup_calls=1) 2>&1 | grep "^|"
  local ppo=(--agent=ppo --env=LunarLander-v2 --hp=total_env_steps=200000)
  timed ppo-gpu train "${ppo[@]}" --run_dir="$RUNS/ppo-gpu"
  timed ppo-cpu cpu train "${ppo[@]}" --run_dir="$RUNS/ppo-cpu"
  timed headline-gpu train --agent=dqn --env=LunarLander-v2 --run_dir="$RUNS/headline-gpu"
}

lease() { lease1; lease2; }

lease1() {  # about 3 minutes: the doctor, --device=cpu with and without XLA, PPO on both
  machine
  local tiny=("${TINY[@]}")
  timed place-cpu-xla train "${tiny[@]}" --run_dir="$RUNS/p-cpu-xla" --device=cpu --xla
  timed place-cpu-noxla train "${tiny[@]}" --run_dir="$RUNS/p-cpu-noxla" --device=cpu --noxla
  local ppo=(--agent=ppo --env=LunarLander-v2 --hp=total_env_steps=200000)
  timed ppo-gpu train "${ppo[@]}" --run_dir="$RUNS/ppo-gpu"
  timed ppo-cpu cpu train "${ppo[@]}" --run_dir="$RUNS/ppo-cpu"
}

lease2() {  # about 4 minutes: the train steps on both, the headline on the GPU
  local steps=(--agents=dqn,a2c,sac --calls=20 --repeats=3 --warmup_calls=5)
  (cd benchmarks && python3 precision_xla.py "${steps[@]}" --combos=float32:off,float32:on) 2>&1 | grep "^|"
  (cd benchmarks && cpu python3 precision_xla.py "${steps[@]}" --combos=float32:off) 2>&1 | grep "^|"
  timed headline-gpu train --agent=dqn --env=LunarLander-v2 --run_dir="$RUNS/headline-gpu"
}

"${1:?usage: gpu_vs_cpu.sh checks|runs|essentials|lease|lease1|lease2}" 2>&1 | tee "$OUT/$1.log"
