#!/usr/bin/env bash
# The one prepared GPU command: install the carried wheels, record the machine, run benchmarks/gpu_suite.py within
# a budget. Run from the repository root on a GPU machine with no registry, the wheels in .gpu/site/site.tar.xz
# (MODEL=0 bash benchmarks/gpu_pack.sh; carry .gpu/site: the working tree plus the 39 MB of .whl/ is over the
# tool's 64 MiB) or, failing that, in .whl/ (docs/real_model.md). Results (gpu_suite.json / .md, the log, the
# machine probe) go to $OUT.
#   OUT=/tmp/out BUDGET=520 bash benchmarks/gpu_run.sh [more gpu_suite.py arguments]
set -uo pipefail
OUT=${OUT:-benchmarks/results/gpu_run}
BUDGET=${BUDGET:-520}
mkdir -p "$OUT"
t0=$(date +%s)
if [[ -f .gpu/site/site.tar.xz ]]; then   # benchmarks/gpu_pack.sh: the wheels installed and packed (~15 MB, not 39)
  mkdir -p /tmp/site && xz -dc .gpu/site/site.tar.xz | tar -C /tmp -x || { echo "unpacking the wheels failed"; exit 1; }
else
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
fi
# USE_HUB_KERNELS=NO: lm-eval's hf model runs transformers' own torch code, as in every earlier run (5.23, carried,
# loads with use_kernels off; 5.25, a device's own if .gpu/site is missing, turns it on and would swap RMSNorm, RoPE
# and SiLU for hub kernels it cannot fetch offline). USE_HUB_KERNELS=YES bash benchmarks/gpu_run.sh asks for them.
export PATH=/tmp/site/bin:$PATH PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
  TOKENIZERS_PARALLELISM=false USE_HUB_KERNELS=${USE_HUB_KERNELS:-NO}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 - <<'PY'
import importlib, os
print("USE_HUB_KERNELS", os.environ.get("USE_HUB_KERNELS"))
for m in ("torch", "transformers", "kernels", "torchtune", "torchao", "lm_eval", "triton", "liger_kernel",
          "cut_cross_entropy", "torchtune_longshort"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"), mod.__file__)
    except Exception as e:  # a missing optional package is a finding, not a failure
        print(m, "not importable:", type(e).__name__, e)
import torch
print("cuda", torch.version.cuda, torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).total_memory / 2**30)
PY
  echo "setup: $(( $(date +%s) - t0 )) s"
} > "$OUT/probe.txt" 2>&1
cat "$OUT/probe.txt"
left=$(( BUDGET - ($(date +%s) - t0) ))
python3 benchmarks/gpu_suite.py --budget "$left" --out "$OUT" --work /tmp/gpu_work "$@" 2>&1 | tee "$OUT/log.txt"
