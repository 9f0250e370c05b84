#!/usr/bin/env bash
# Training throughput on a GPU machine: configs/train/ppo-gpu.yaml on the GPU with each vector env
# kind (worker processes per env, the batched env in one process and over N workers), the rollout
# loop split into the env's step and the policy's forward pass, the same config on the machine's
# CPU, and the distillation configs' PPO phase (the small network) on GPU and CPU.
#   bash benchmarks/gpu_vs_cpu.sh [OUT_DIR]
# DEVICE=cpu and SCALE=16 (a sixteenth of every budget) try the script on a machine without CUDA.
# Each part has its own time limit so that a slow part cannot hide the others' figures.
set -u
out=${1:-${OUT:-/tmp/gpu_vs_cpu}}
dev=${DEVICE:-cuda}
scale=${SCALE:-1}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
n() { echo $(($1 / scale)); }
python3 - <<'EOF' | tee "$out/machine.txt"
import os, sys, torch
try:
    import numba
    nb = numba.__version__
except Exception as e:  # the compiled kernels fall back to the reference path (GANGSCHED_JIT=0)
    nb = f"missing ({e})"
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-"
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(), gpu,
      "threads", torch.get_num_threads(), "cpus", os.cpu_count(), "numba", nb)
EOF
python3 -c "import numba" 2>/dev/null || export GANGSCHED_JIT=0
# 1. Compile the kernels once into numba's disk cache, so that worker processes load them.
timeout 90 python3 -c "
import time, numpy as np, gymnasium as gym, envs
t = time.perf_counter(); env = gym.make('gangsched/GpuCluster-v0'); obs, info = env.reset(seed=0); rng = np.random.default_rng(0)
for _ in range(300):
    obs, r, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(obs['action_mask']))))
    if term or trunc: obs, info = env.reset()
print(f'compile + 300 decisions: {time.perf_counter() - t:.1f} s')" 2>&1 | tee "$out/warm.txt"
# 2. The rollout loop alone: env step against policy forward, per vector env kind (32 envs).
timeout 120 python3 -m benchmarks.rollout_speed --config configs/train/ppo-gpu.yaml --device "$dev" --steps "$(n 96)" \
    --kinds subproc,batched,batched:8,batched:16 2>&1 | tee "$out/rollout.jsonl"
# 3. End to end on the GPU: worker processes per env (the earlier figure) and the batched env.
for kind in "subproc" "batched 8" "batched 16"; do
  set -- $kind
  timeout 75 python3 -m benchmarks.train_speed --config configs/train/ppo-gpu.yaml --device "$dev" --timesteps "$(n 16384)" \
      --vec-env "$1" ${2:+--vec-workers $2} --skip-cartpole 2>&1 | tee -a "$out/train_gpu.jsonl"
done
# 4. The same config on this machine's CPU (all its threads), batched env over 8 workers.
timeout 120 python3 -m benchmarks.train_speed --config configs/train/ppo-gpu.yaml --device cpu --timesteps "$(n 4096)" \
    --vec-env batched --vec-workers 8 --skip-cartpole 2>&1 | tee "$out/train_cpu.jsonl"
# 5. The distillation configs' PPO phase (d_model 64, 8 envs): GPU, CPU with all threads, CPU with one.
cfg=configs/train/research/distill-topology-stress-s8.yaml
timeout 50 python3 -m benchmarks.train_speed --config $cfg --device "$dev" --timesteps "$(n 8192)" --skip-cartpole 2>&1 | tee "$out/distill.jsonl"
timeout 50 python3 -m benchmarks.train_speed --config $cfg --device cpu --timesteps "$(n 8192)" --skip-cartpole 2>&1 | tee -a "$out/distill.jsonl"
OMP_NUM_THREADS=1 timeout 50 python3 -m benchmarks.train_speed --config $cfg --device cpu --timesteps "$(n 8192)" --skip-cartpole 2>&1 | tee -a "$out/distill.jsonl"
# 6. The env's own speed on this machine's cores, beside CartPole in the same invocation.
timeout 90 python3 -m benchmarks.env_speed --steps "$(n 4000)" --jobs "$(n 10000)" --repeat 1 2>&1 | tee "$out/env_speed.txt"
echo done
