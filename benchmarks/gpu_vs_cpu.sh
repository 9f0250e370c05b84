#!/usr/bin/env bash
# Training throughput of configs/train/ppo-gpu.yaml on the GPU and on the CPU of one machine,
# beside SB3 PPO on CartPole-v1 with the same n_envs / n_steps / batch / epochs.
#   bash benchmarks/gpu_vs_cpu.sh [OUT_DIR]
# Each part has its own time limit so a slow CPU part cannot hide the GPU figures.
set -u
out=${1:-${OUT:-/tmp/gpu_vs_cpu}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-', 'threads', torch.get_num_threads(), 'python', sys.version.split()[0])" | tee "$out/machine.txt"
timeout 180 python3 -m benchmarks.train_speed --config configs/train/ppo-gpu.yaml --device cuda --timesteps 16384 | tee "$out/cuda.jsonl"
timeout 220 python3 -m benchmarks.train_speed --config configs/train/ppo-gpu.yaml --device cpu --timesteps 4096 | tee "$out/cpu.jsonl"
echo done
