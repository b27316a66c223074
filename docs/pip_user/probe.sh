#!/bin/bash
# The pip user's path (issue 32): a fresh venv, `pip install .` (not editable) from a copy of the checkout, then the
# README's commands from a folder outside it. Prints each command and its last lines. It works in W (default
# /tmp/pipuser), which it deletes first: W=/some/new/folder bash docs/pip_user/probe.sh keeps another one.
set -u
SRC=${SRC:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}
W=${W:-/tmp/pipuser}; rm -rf $W; mkdir -p $W/src $W/home
git -C $SRC archive HEAD | tar -x -C $W/src
cd $W
python3.11 -m venv venv && . venv/bin/activate
pip install -q torch==2.13.0 2>&1 | grep -v WARN | tail -2
pip install -q $W/src 2>&1 | grep -v WARN | tail -2
run() { echo; echo "\$ $*"; ( eval "$@" ) > $W/last.txt 2>&1; rc=$?; grep -v "Warn\|warn(\|^ *warnings.warn" $W/last.txt | tail -${TAILN:-4}; echo "[exit $rc]"; }
cd $W/home
python -c "import torchtune_longshort, sys; print('imported from', torchtune_longshort.__file__)"
run "longshort-cp tiny/longshort_stdlib.yaml run.yaml && tune run torchtune_longshort/recipes/longshort_finetune.py --config run.yaml max_steps=2"
OUT=outputs/$(ls outputs | grep -v tokenizers | head -1); STEP=$(ls -d $OUT/step_* | tail -1)
TOK=$(find outputs/tokenizers -name tokenizer.model | head -1)
run "longshort-cp tiny/lora_from_checkpoint.yaml lora.yaml && tune run torchtune_longshort/recipes/longshort_finetune.py --config lora.yaml checkpoint_dir=$STEP tokenizer.path=$TOK output_dir=outputs/lora max_steps=2"
TAILN=40 run "find outputs/lora | sort"
run "longshort-validate run.yaml max_step=3"
run "longshort-misalignment --checkpoint-dir $STEP --data stdlib --length 256 --output misalignment.json --device cpu"
run "longshort-eval run --model longshort --model_args pretrained=$STEP --tasks longshort_ppl --limit 2 --output_path results/ours --device cpu --metadata '{\"max_seq_lengths\": \"256\", \"ppl_source\": \"stdlib\"}'"
run "printf 'model: longshort\\nmodel_args: {pretrained: $STEP}\\ntasks: [longshort_ppl]\\nlimit: 2\\ndevice: cpu\\noutput_path: results/yaml\\nmetadata: {max_seq_lengths: \\\"256\\\", ppl_source: stdlib}\\n' > eval.yaml && longshort-eval run --config eval.yaml"
run "lm_eval --model hf --model_args pretrained=$STEP,dtype=float32 --include_path \"\$(longshort-eval tasks-path)\" --tasks longshort_ppl --limit 2 --output_path results/hf --device cpu --metadata '{\"max_seq_lengths\": \"256\", \"ppl_source\": \"stdlib\"}'"
run "longshort-eval-report results/ours results/hf --labels ours,hf --out report/"
run "python -m torchtune_longshort.synthetic --figure 1a --quick --out syn"
run "longshort-cp study/cpu_small.yaml s.yaml && timeout 900 python -m torchtune_longshort.study --config s.yaml --quick --out study_quick"
echo; echo "== device rule"; 
run "tune run torchtune_longshort/recipes/longshort_finetune.py --config run.yaml device=cuda"
run "longshort-misalignment --checkpoint-dir $STEP --data stdlib --length 256 --device cuda"
run "longshort-eval run --model longshort --model_args pretrained=$STEP --tasks longshort_ppl --device cuda"
echo; echo "== bad input"
run "tune run torchtune_longshort/recipes/longshort_finetune.py --config run.yaml max_step=3"
run "tune run torchtune_longshort/recipes/longshort_finetune.py --config run.yaml seq_len=-4"
run "tune run torchtune_longshort/recipes/longshort_finetune.py --config run.yaml output_dir=$W overwrite_output_dir=True"
run "longshort-eval run --model longshort --model_args pretrained=$STEP --tasks longshort_pplx --device cpu"
run "longshort-misalignment --checkpoint-dir /nonexistent/ckpt --length 256 --device cpu"
run "longshort-misalignment --checkpoint-dir $STEP --length 1q --device cpu"
run "longshort-cp tiny/nonexistent.yaml x.yaml"
run "longshort-validate run.yaml loss.alpha=-1"
echo; echo "== after"; ls $W/home
