#!/usr/bin/env bash
# GPU check for the simulation layer (<= 5 min on an H200: 60 s tests + 230 s benchmark, cut by timeout). Installs nothing; writes only $OUT/gpu_bench.txt
# (and pytest's cache under /tmp). Needs python3 with torch (CUDA build), numpy, scipy; pytest is optional.
# Usage (from the repository root):  OUT=/some/dir bash benchmarks/gpu_check.sh
set -u
OUT="${OUT:-/tmp}"
LOG="$OUT/gpu_bench.txt"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
{
  echo "== $(date -u) $(hostname)"
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
  if python3 -c "import pytest, typer, rich" 2>/dev/null; then
    echo "== pytest -m gpu"
    timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_simulation_gpu.py 2>&1 | tail -5
  else
    echo "== pytest/typer/rich missing: running the GPU parity check inline"
    timeout 60 python3 - <<'PY'
import torch
from tiedattention.problem import Problem
from tiedattention.simulation import sample_dataset, train
pb = Problem.from_options()
data = sample_dataset(pb, 800, 40, 0)
for s in ("prox", "lbfgs", "adam"):
    c = train(pb, data, solver=s, device="cpu")
    g = train(pb, data, solver=s, device="cuda")
    print(f"{s}: cpu {c.objective:.12g} cuda {g.objective:.12g} rel {abs(g.objective - c.objective) / c.objective:.2e}")
PY
  fi
  echo "== bench_trainers.py --d 400 --device cuda"
  timeout 230 python3 benchmarks/bench_trainers.py --d 400 --device cuda --adam-max-steps 100000
  echo "== exit $?"
} 2>&1 | tee "$LOG"
