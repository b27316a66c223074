"""Every bad config value of the probes (issue 13's list and issue 26's) is refused by the recipe's constructor,
before any output folder exists, with the field named. One test per family of values; each asserts that no output
folder was made. The constructor builds the typed config (``training.recipe_config``) and nothing else."""

from __future__ import annotations

import json

import pytest
import torch
from recipe_config import make_cfg

VALIDATION = {"dataset": {"_component_": "torchtune_longshort.data.corpus.stdlib", "limit": 2},
              "seq_len": 128, "num_sequences": 1, "every_n_steps": 2}
ROPE_NODE = {"_component_": "torchtune_longshort.models.rope_scaled", "method": "yarnn", "max_seq_len": 256,
             "model": {"_component_": "torchtune.models.llama2.llama2", "vocab_size": 512, "num_layers": 2,
                       "num_heads": 4, "num_kv_heads": 2, "embed_dim": 64, "max_seq_len": 128}}
SCRATCH = {"_component_": "torchtune_longshort.models.hf_decoder", "family": "llama", "vocab_size": 512, "num_layers": 1,
           "num_heads": 4, "num_kv_heads": 2, "embed_dim": 64, "max_seq_len": 256}
STDLIB_TOKENIZER = "torchtune_longshort.training.bootstrap.stdlib_sentencepiece_tokenizer"
TEXT_COMPLETION = "torchtune.datasets.text_completion_dataset"
CKPT_TOKENIZER = "torchtune_longshort.models.checkpoint_tokenizer"  # takes **_ and drops them
STDLIB, LOCAL_TEXT = "torchtune_longshort.data.corpus.stdlib", "torchtune_longshort.data.corpus.local_text"

# family -> [(overrides, field named in the message, a pattern of the message)]
FAMILIES = {
    "unknown_keys": [
        ({"max_step": 2}, "max_step", r"did you mean 'max_steps'"),
        ({"resume_from_checkpoint": True}, "resume_from_checkpoint", r"did you mean 'resume'"),
        ({"epochs": 1}, "epochs", r"did you mean 'max_steps'"),
        ({"loss.alhpa": 0.5}, "loss.alhpa", r"did you mean 'alpha'"),
        ({"validation": VALIDATION, "validation.every_n_step": 1}, "validation.every_n_step",
         r"did you mean 'every_n_steps'"),
        ({"optimizer.lrr": 1e-3}, "optimizer.lrr", r"did you mean 'lr'"),
        ({"model.num_layer": 2}, "model.num_layer", r"did you mean 'num_layers'"),
        ({"dataset.limt": 3}, "dataset.limt", r"did you mean 'limit'"),
        # torchtune's DiskLogger takes **kwargs and drops them: the typo was ignored without a word
        ({"metric_logger.filname": "log.txt"}, "metric_logger.filname", r"did you mean 'filename'"),
        ({"tokenizer._component_": CKPT_TOKENIZER, "tokenizer.pathh": "x"}, "tokenizer.pathh", r"did you mean 'path'"),
    ],
    "integers": [
        ({"save_every_n_steps": 0}, "save_every_n_steps", r"integer >= 1"),
        ({"log_every_n_steps": 0}, "log_every_n_steps", r"integer >= 1"),
        ({"max_steps": -1}, "max_steps", r"integer >= 1"),
        ({"max_steps": 1.5}, "max_steps", r"integer >= 1"),
        ({"stop_after_step": 0}, "stop_after_step", r"integer >= 1"),
        # past the last step: accepted, and the run trained to its end where an early stop was asked
        ({"max_steps": 4, "stop_after_step": 5}, "stop_after_step",
         r"^stop_after_step=5 is past this run's last step \(max_steps=4\): it would never stop the run; .*=null"),
        ({"max_steps": 10, "equal_compute_overhead": 2, "loss.alpha": 0.1, "stop_after_step": 6}, "stop_after_step",
         r"^stop_after_step=6 is past this run's last step \(5: max_steps=10 over equal_compute_overhead=2, "),
        ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps", r"integer >= 1"),
        ({"batch_size": 0}, "batch_size", r"integer >= 1"),
        ({"seed": -1}, "seed", r"integer >= 0"),
        # torchtune's set_seed refused it when the run started, naming no key; longshort-validate said OK
        ({"seed": 2**32}, "seed", r"^seed=4294967296 is too large for 1 process\(es\): .*accepted: 0 \.\. 4294967295"),
    ],
    "numbers": [
        ({"clip_grad_norm": "abc"}, "clip_grad_norm", r"finite number > 0"),
        ({"clip_grad_norm": -1}, "clip_grad_norm", r"finite number > 0"),
        ({"equal_compute_overhead": 0.5}, "equal_compute_overhead", r">= 1"),
        ({"loss.alpha": -0.1}, "loss.alpha", r">= 0"), ({"optimizer.lr": -1}, "optimizer.lr", r">= 0"),
        ({"optimizer.weight_decay": -1}, "optimizer.weight_decay", r"^optimizer.weight_decay=-1 is not accepted: "),
        # a value of another kind: torch's TypeError / IndexError as a traceback, exit 1
        ({"optimizer.weight_decay": "abc"}, "optimizer.weight_decay", r"^optimizer.weight_decay='abc' is not acc"),
        # torch reads True as 1: weight_decay=true trained with a decay of 1.0, and longshort-validate said OK
        ({"optimizer.weight_decay": True}, "optimizer.weight_decay", r"^optimizer.weight_decay=True is not accepted: "),
        ({"optimizer.eps": True}, "optimizer.eps", r"^optimizer.eps=True is not accepted: expected a number >= 0"),
        # it named torch's "list index out of range"
        ({"optimizer.betas": [0.9]}, "optimizer.betas", r"^optimizer.betas=\[0.9\] is not accepted: expected a pair"),
        # torch reads a switch's truthiness: fused='abc' passed and trained with fused AdamW
        ({"optimizer.fused": "abc"}, "optimizer.fused", r"^optimizer.fused='abc' is not accepted: expected true or"),
        ({"optimizer.amsgrad": 1}, "optimizer.amsgrad", r"^optimizer.amsgrad=1 is not accepted: expected true or"),
    ],
    "windows": [
        ({"seq_len": 2}, "seq_len", r"even number >= 4"),
        ({"seq_len": 63}, "seq_len", r"seq_len=63 must be an even number"),
        ({"seq_len": 100.0}, "seq_len", r"^seq_len=100.0 is not accepted: expected an even integer >= 4"),
        ({"seq_len": 1024}, "seq_len", r"above the range of the model's RoPE.*max_seq_len=256"),
        ({"e_range": [1, "L/0"]}, "e_range", r"seq_len=64"),
        ({"e_range": [0, "L/2"]}, "e_range", r"\[1, L=64\]"),
        ({"e_range": [1, "2*L"]}, "e_range", r"\[1, L=64\]"),
        # the listing floor compares nothing at e = L/2: alpha > 0 would do nothing at every step
        ({"e_range": ["L/2", "L/2"]}, "e_range", r"no shift leaves a position to compare.*loss.alpha=0.1 does nothing"),
        ({"e_range": ["L/2", 1]}, "e_range", r"lo > hi"),
        ({"e_range": "abc"}, "e_range", r"a pair"),
    ],
    "loss": [
        ({"loss.divergence": "kl"}, "loss.divergence", r"'sce'"),
        ({"loss.min_context": "half"}, "loss.min_context", r"'listing'"),
        ({"loss.min_context": 0}, "loss.min_context", r"'listing'"),
        ({"loss.min_context": 1000}, "loss.min_context", r"\[1, L=64\]"),
        ({"loss.num_chunks": 0}, "loss.num_chunks", r"^loss.num_chunks=0 must be an int >= 1$"),
        ({"window_bos": True, "loss.alpha": 0.1}, "window_bos", r"pre-train"),
    ],
    "choices": [
        ({"dtype": "fp8"}, "dtype", r"one of \['fp32', 'bf16'\]"),
        # pure float16 without loss scaling: accepted, and the tiny run's loss was NaN at step 2
        ({"dtype": "fp16"}, "dtype", r"dtype=fp16 is not accepted: .*no loss scaling.*use dtype=bf16"),
        ({"device": "tpu"}, "device", r"cpu, cuda, cuda:N, mps or mps:N"),
        ({"device": "cuda"}, "device", r"CUDA is not available"),
        ({"window_bos": "yes"}, "window_bos", r"true or false"),
        ({"clip_rope_separately": "yes"}, "clip_rope_separately", r"true or false"),
        ({"resume": "yes"}, "resume", r"true or false"),
        # `output_dir: ~` (YAML's null, not the home folder) was "config is missing required key 'output_dir'"
        ({"output_dir": None}, "output_dir", r"'output_dir' is null, and it needs a value.*'~' and 'null' as null"),
    ],
    "validation": [
        ({"validation": {**VALIDATION, "seq_len": 1024}}, "validation.seq_len", r"max_seq_len=256"),
        ({"validation": {**VALIDATION, "num_sequences": 0}}, "validation.num_sequences", r"integer >= 1"),
        ({"validation": {"seq_len": 64, "num_sequences": 1}}, "validation.dataset", r"missing required key"),
    ],
    "components": [
        ({"tokenizer.path": "/nonexistent/tokenizer.model"}, "tokenizer.path", r"does not exist"),
        ({"tokenizer._component_": STDLIB_TOKENIZER, "tokenizer.path": "DATA/tok"}, "tokenizer.path",
         r"cannot be created"),  # its parent is a file
        # checkpoint_tokenizer on a file (or folder) that holds no tokenizer: refused only at setup, after the seed
        # line, naming no key; longshort-validate said OK
        ({"tokenizer._component_": CKPT_TOKENIZER, "tokenizer.path": "DATA"},
         "tokenizer.path", r"^tokenizer.path=.*d.jsonl': tokenizer .* is neither a SentencePiece model"),
        ({"model": ROPE_NODE}, "model.method", r"not a RoPE method \(did you mean 'yarn'\?\)"),
        ({"checkpoint_dir": None, "model": {**SCRATCH, "num_kv_heads": 3}}, "num_kv_heads",
         r"num_heads=4 is not divisible by num_kv_heads=3"),  # torchtune's builder said it once the folder existed
        ({"checkpoint_dir": None, "model": {**SCRATCH, "embed_dim": 130}}, "embed_dim",
         r"embed_dim=130 is not divisible by num_heads=4"),
        # from Python and YAML alike: built, then NaN logits or a failure at the first forward
        ({"checkpoint_dir": None, "model": {**SCRATCH, "embed_dim": 36}}, "embed_dim", r"head size 9, odd"),
        ({"checkpoint_dir": None, "model": {**SCRATCH, "num_layers": 0}}, "num_layers", r"num_layers=0 .*>= 1"),
        ({"checkpoint_dir": None, "model": {**SCRATCH, "norm_eps": -1.0}}, "norm_eps", r"norm_eps=-1.0 .* > 0"),
        # '' is the working directory ("checkpoint_dir='.' has no config.json" after seeding); norm_eps >= 1 no epsilon
        ({"model.checkpoint_dir": ""}, "model.checkpoint_dir", r"^model.checkpoint_dir='' .*non-empty string or null"),
        ({"dataset": {"_component_": LOCAL_TEXT, "path": ""}}, "dataset.path", r"^dataset.path='' .*non-empty string"),
        ({"dataset": {"_component_": LOCAL_TEXT, "path": [""]}}, "dataset.path[0]", r"^dataset.path\[0\]='' is not"),
        ({"checkpoint_dir": None, "model": {**SCRATCH, "norm_eps": 3}}, "norm_eps", r"norm_eps=3 .* > 0 and < 1 \(an"),
        # 0 positions: refused as "seq_len=64 is above the range of the model's RoPE"; a negative start as a factor < 1
        ({"checkpoint_dir": None, "model": {**SCRATCH, "max_seq_len": 0}}, "model.max_seq_len",
         r"^model.max_seq_len=0 is not accepted: expected a number of positions >= 1, or null$"),
        ({"model": {**ROPE_NODE, "method": "yarn", "original_max_seq_len": -1, "model": {
            "_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": "${checkpoint_dir}"}}},
         "model.original_max_seq_len", r"^model.original_max_seq_len=-1 is not accepted: expected a number of"),
        ({"checkpoint_dir": None, "model": {**SCRATCH, "rope_base": 0.5}}, "rope_base", r"rope_base=0.5 .* > 1"),
        ({"checkpoint_dir": "/nonexistent/ckpt"}, "checkpointer.checkpoint_dir", r"does not exist"),
        # a value of another kind: Path()'s TypeError traceback (exit 1) from longshort-validate and tune run alike
        ({"checkpointer.checkpoint_dir": 0}, "checkpointer.checkpoint_dir",
         r"^checkpointer.checkpoint_dir=0 is not accepted: expected a non-empty string$"),
        ({"checkpoint_dir": [1, 2]}, "checkpoint_dir", r"^checkpoint_dir=\[1, 2\] is not accepted: expected a non-empty"),
        ({"checkpointer.model_type": "MISTRAL"}, "checkpointer.model_type", r"does not convert a 'llama'"),
        # the same from random weights, against model.family: passed without a word (an audit)
        ({"checkpoint_dir": None, "model": SCRATCH, "checkpointer.model_type": "FOO"}, "checkpointer.model_type",
         r"does not convert a 'llama'.*leave it out: model.family decides"),
        # torchtune's checkpointer.output_dir, set elsewhere: ignored without a word (every checkpoint went to
        # output_dir)
        ({"checkpointer.output_dir": "/nonexistent/ckpts"}, "checkpointer.output_dir", r"is not output_dir=.*step_<k>"),
        # torchtune's checkpointer arguments the recipe never reads: trained from the folder's own shards,
        # without a word
        ({"checkpointer.checkpoint_files": ["nope.safetensors"]}, "checkpointer.checkpoint_files",
         r"\['nope.safetensors'\] is not what the recipe loads.*model.safetensors.*or null"),
        # one file as a string, or a value of another kind: ignored without a word, where the list was refused
        ({"checkpointer.checkpoint_files": "nope.safetensors"}, "checkpointer.checkpoint_files",
         r"=\['nope.safetensors'\] is not what the recipe loads"),
        ({"checkpointer.checkpoint_files": 0}, "checkpointer.checkpoint_files",
         r"^checkpointer.checkpoint_files=0 is not accepted: expected a list of checkpoint_dir's weight files"),
        # torchtune's {filename_format, max_filename} form (its multi-shard configs): not compared, ignored
        ({"checkpointer.checkpoint_files": {"filename_format": "model-{}-of-{}.safetensors", "max_filename": "00004"}},
         "checkpointer.checkpoint_files", r"'model-00004-of-00004.safetensors'\] is not what the recipe loads"),
        ({"checkpointer.checkpoint_files": {"filename_format": "model.safetensors"}}, "checkpointer.checkpoint_files",
         r"is not accepted \(Must pass 'filename_format' and 'max_filename'.*as torchtune takes them"),
        # from random weights: checked only with a start folder, so the files were ignored without a word
        ({"checkpoint_dir": None, "model": SCRATCH, "checkpointer.checkpoint_files": ["model.safetensors"]},
         "checkpointer.checkpoint_files", r"^checkpointer.checkpoint_files=\['model.safetensors'\] names weight "
         r"files, but checkpointer.checkpoint_dir is null: .*or checkpointer.checkpoint_files: null$"),
        ({"checkpointer.recipe_checkpoint": "state.pt"}, "checkpointer.recipe_checkpoint",
         r"not read by this recipe.*resume=True"),
        # QLoRA on weights NF4 cannot quantize (the tiny folder's 64 x 64 projections): refused when the model was
        # built, so longshort-validate said OK; quantize_base without lora_rank trained every weight unquantized
        ({"model.lora_rank": 4, "model.lora_alpha": 8, "model.quantize_base": True}, "model.quantize_base",
         r"^model.quantize_base=True \(QLoRA\): NF4 .* q_proj \(64, 64\): 4096 values"),
        ({"model.quantize_base": True}, "model", r"LoRA settings \['quantize_base'\] given without model.lora_rank"),
        # the same from random weights: checked only with a start folder, so a from-scratch config passed it
        ({"checkpoint_dir": None, "model": SCRATCH, "checkpointer.adapter_checkpoint": "adapter.pt"},
         "checkpointer.adapter_checkpoint", r"not read by this recipe.*resume=True"),
        # an hf_decoder's max_seq_len inside rope_scaled is where the scaling starts: at the target it made YaRN's
        # factor 1 (no scaling) without a word (the folder has 256 positions)
        ({"model": {**ROPE_NODE, "method": "yarn", "max_seq_len": 512,
                    "model": {"_component_": "torchtune_longshort.models.hf_decoder",
                              "checkpoint_dir": "${checkpoint_dir}", "max_seq_len": 512}}},
         "model.model.max_seq_len",
         r"=512 inside rope_scaled.*factor 512/512 = 1.*past the 256 positions.*drop model.model"),
        # `model.model=<path>` on the command line (torchtune's `node=<path>` shortcut is for top-level nodes): the
        # inner node became a string, which validate passed and rope_scaled refused once the run had started
        ({"model": {**ROPE_NODE, "method": "yarn", "model": "torchtune_longshort.models.hf_decoder"}}, "model.model",
         r"^model.model='torchtune_longshort.models.hf_decoder' is not accepted: rope_scaled wraps a model node .*"
         r"set model.model._component_$"),
        # the model node's own folder: longshort-validate passed it, tune run named the (good) top-level checkpoint_dir
        ({"model.checkpoint_dir": "/nonexistent/ckpt"}, "model.checkpoint_dir=",
         r"does not exist: expected a Hugging Face checkpoint folder"),
        ({"dataset": {"_component_": "torchtune_longshort.data.corpus.local_text", "path": "/nonexistent/d"}},
         "dataset.path", r"does not exist"),
        ({"dataset": {"_component_": TEXT_COMPLETION, "source": "json", "data_files": "DATA", "packed": True}},
         "dataset.packed", r"pass packed=False"),
        # this package's components' arguments of the wrong kind: a traceback inside the component when the run
        # built it (min_bytes: "'>=' not supported", suffixes: "Value after * must be an iterable"), an encoding
        # Python does not know: LookupError; longshort-validate said OK to the first and the last
        ({"dataset": {"_component_": STDLIB, "min_bytes": "abc"}}, "dataset.min_bytes",
         r"='abc' is not accepted: expected an integer \(stdlib's min_bytes\)"),
        # a negative smallest size: read as 0 (every file) without a word; longshort-validate and tune run said OK
        ({"validation": {**VALIDATION, "dataset": {"_component_": STDLIB, "min_bytes": -1}}},
         "validation.dataset.min_bytes", r"^validation.dataset.min_bytes=-1 is not accepted: expected an integer >= 0"),
        ({"dataset": {"_component_": LOCAL_TEXT, "path": "DATA", "suffixes": ".txt"}}, "dataset.suffixes",
         r"expected a list of strings"),
        ({"dataset": {"_component_": LOCAL_TEXT, "path": "DATA", "encoding": "nosuch"}}, "dataset.encoding",
         r"is not a text encoding Python knows"),
        # a tokenizer the run would train, at a size it cannot train (refused as vocab_size=-3, naming no section)
        # or from no files (refused as the stdlib corpus's limit=0)
        ({"tokenizer._component_": STDLIB_TOKENIZER, "tokenizer.path": "TMP/tok", "tokenizer.vocab_size": -3},
         "tokenizer.vocab_size", r"integer >= 300"),
        ({"tokenizer._component_": STDLIB_TOKENIZER, "tokenizer.path": "TMP/tok", "tokenizer.train_files_limit": 0},
         "tokenizer.train_files_limit", r"integer >= 1"),
        ({"optimizer._component_": "torch.optim.Adamm"}, "optimizer._component_", r"does not import"),
        # a module where its builder belongs (torchtune's `model=<path>` override): validate said OK, tune run ended
        # in "TypeError: 'module' object is not callable" (the optimizer's check named no key)
        ({"model._component_": "torchtune.models.llama2"}, "model._component_",
         r"^model._component_='torchtune.models.llama2' names a module, not a class or function: name the one that "
         r"builds model, as torchtune.models.llama2.<name>$"),
        ({"optimizer._component_": "torch.optim"}, "optimizer._component_", r"names a module, not a class"),
        ({"batch_size": 3, "gradient_accumulation_steps": 2}, "batch_size", r"not divisible"),
        # a local hub source that is not there: datasets' "Couldn't find any data file at ..." (no key, no fix) when
        # the run started; longshort-validate said OK
        ({"dataset": {"_component_": "torchtune_longshort.data.corpus.hf_text", "source": "/nonexistent/d"}},
         "dataset.source", r"^dataset.source='/nonexistent/d' does not exist: .*hub dataset"),
        # torchtune's cosine schedule took a negative warmup without a word (it started part-way down its decay)
        ({"lr_scheduler.num_warmup_steps": -1}, "lr_scheduler.num_warmup_steps", r"=-1 .*integer >= 0"),
        # past the warm-up only: a TypeError mid-run
        ({"lr_scheduler.num_cycles": "abc"}, "lr_scheduler.num_cycles",
         r"^lr_scheduler: can't .*lr_scheduler.num_cycles='abc'"),
        # corpus.stdlib's limit=-3 trained on all files but the last 3, without a word
        ({"dataset.limit": -3}, "dataset.limit", r"=-3 .*integer >= 1"),
        # refused only when the corpus was built, naming `include_tests` / `split` alone; validate said OK
        ({"dataset.include_tests": "maybe"}, "dataset.include_tests", r"^dataset.include_tests='maybe': accepted True"),
        ({"dataset.split": "trian"}, "dataset.split", r"^dataset.split='trian': accepted None .*'train', 'heldout'"),
        # rope_scaled's factor < 1: refused only when the model was built, naming `factor` alone; validate said OK
        ({"model": {**ROPE_NODE, "method": "yarn", "factor": 0.5, "model": {
            "_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": "${checkpoint_dir}"}}},
         "model.factor", r"=0.5 is not accepted: expected a number >= 1"),
        ({"model": {**ROPE_NODE, "method": "yarn", "max_seq_len": 128, "model": {
            "_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": "${checkpoint_dir}"}}},
         "model.max_seq_len",
         r"=128 is shorter than the 256 positions.*factor 128/256 = 0.5 is < 1; give model.max_seq_len >= 256"),
        # a RoPE method's own argument checks ran when the model was built, naming the bare argument; validate: OK
        ({"model": {**ROPE_NODE, "method": "yarn", "attention_factor": -1, "model": {
            "_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": "${checkpoint_dir}"}}},
         "model.attention_factor", r"^model.attention_factor=-1 is not accepted: expected a positive number"),
        # a list where CLEX's activation name belongs: "rope method 'clex': unhashable type: 'list'", naming no key
        ({"model": {**ROPE_NODE, "method": "clex", "max_seq_len": 512, "act": [1, 2], "model": {
            "_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": "${checkpoint_dir}"}}},
         "model.act", r"^model.act=\[1, 2\] is not accepted: expected one of \['silu', 'tanh'\]$"),
        ({"model": {**ROPE_NODE, "method": "yarn", "alpha": 32, "beta": 1, "model": {
            "_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": "${checkpoint_dir}"}}},
         "model (RoPE method 'yarn')", r"YaRN needs beta > alpha"),
    ],
    # a component's argument without a default, absent from its node (the recipe passes none of these): before, the
    # constructor's TypeError came as a traceback once the model was built
    "missing_arguments": [
        ({"position_sampler": {"_component_": "torchtune_longshort.rope.PoSEPositions"}}, "position_sampler.target_len",
         r"^position_sampler: torchtune_longshort.rope.PoSEPositions needs position_sampler.target_len, which the "
         r"config does not give: add it$"),
        ({"lr_scheduler": {"_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup"}},
         "lr_scheduler.num_warmup_steps", r"needs lr_scheduler.num_warmup_steps, which"),
        ({"dataset": {"_component_": TEXT_COMPLETION}}, "dataset.source", r"needs dataset.source, which"),
        # rope_scaled with LongRoPE and no factor lists (as on a Phi-3.5 start, whose own it does not take): Python's
        # "LongRoPE.__init__() missing 2 required keyword-only arguments" named neither key nor where to give them
        ({"model": {**ROPE_NODE, "method": "longrope", "max_seq_len": 512, "model": {
            "_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": "${checkpoint_dir}"}}},
         "model.short_factor", r"^model: RoPE method 'longrope' needs model.short_factor and model.long_factor, "
                               r"which the config does not give .*: add them"),
    ],
    # an explicit null, which torchtune's instantiate hands the component as None: the check read it as the
    # component's default and said OK; tune run refused it once the model was loaded (alpha=None, naming no
    # section), or ended in a traceback (DiskLogger's log_dir)
    "nulls": [
        ({"loss.alpha": None}, "loss.alpha", r"^loss.alpha=None must be a finite number >= 0 \(null "
         r"is handed to the component as None, not its default: leave alpha out, or ~loss.alpha on the command line, "
         r"for its default 0.1\)$"),
        ({"loss.num_chunks": None}, "loss.num_chunks", r"=None must be an int >= 1 \(null is handed"),
        ({"loss.divergence": None}, "loss.divergence", r"not known.*\(null is handed"),
        ({"metric_logger.log_dir": None}, "metric_logger.log_dir",
         r"=None is not accepted: .*\(null is handed to the component as None, and it has no default: set a value\)"),
        ({"tokenizer.path": None}, "tokenizer.path", r"=None is not accepted: .*and it has no default"),
        # a required argument of this package's own components: rope_scaled's method
        ({"model": {**ROPE_NODE, "method": None}}, "model.method",
         r"^model.method=None is not accepted: expected a string \(rope_scaled's method\)$"),
        # corpus.stdlib's min_bytes: passed, and the run ended in "'>=' not supported ... 'NoneType'" once loaded
        ({"dataset": {"_component_": STDLIB, "min_bytes": None}}, "dataset.min_bytes",
         r"^dataset.min_bytes=None is not accepted: expected an integer >= 0 \(the smallest file kept"),
    ],
}


@pytest.fixture(scope="module")
def recipe_cls():
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    return LongShortFinetuneRecipe


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("data") / "d.jsonl"
    p.write_text(json.dumps({"text": "x = 1\n" * 100}) + "\n")
    return str(p)


def _refused(recipe_cls, tmp_path, ckpt, tok, over, field, match, data_file):
    if over.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = tmp_path / "out"
    over = json.loads(json.dumps(over).replace('"DATA', '"' + data_file).replace('"TMP', '"' + str(tmp_path)))
    cfg = make_cfg(ckpt, tok, out, **over)
    with pytest.raises((ValueError, KeyError, OSError)) as err:
        recipe_cls(cfg)
    assert field in str(err.value), str(err.value)
    assert __import__("re").search(match, str(err.value)), str(err.value)
    assert not out.exists() and not (tmp_path / "tok").exists()


def _cases(family):
    return pytest.mark.parametrize("over,field,match", FAMILIES[family], ids=[c[1] for c in FAMILIES[family]])


@_cases("unknown_keys")
def test_unknown_keys(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data_file, over, field, match):
    _refused(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, field, match, data_file)


@_cases("integers")
def test_integers(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data_file, over, field, match):
    _refused(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, field, match, data_file)


@_cases("numbers")
def test_numbers(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data_file, over, field, match):
    _refused(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, field, match, data_file)


@_cases("windows")
def test_windows(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data_file, over, field, match):
    _refused(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, field, match, data_file)


@_cases("loss")
def test_loss(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data_file, over, field, match):
    _refused(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, field, match, data_file)


@_cases("choices")
def test_choices(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data_file, over, field, match):
    _refused(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, field, match, data_file)


@_cases("validation")
def test_validation(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data_file, over, field, match):
    _refused(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, field, match, data_file)


@_cases("components")
def test_components(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data_file, over, field, match):
    _refused(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, field, match, data_file)


def test_the_probe_list_is_whole():
    """49 values in the probe; the families here hold them and a few more."""
    assert sum(len(v) for v in FAMILIES.values()) >= 49


@_cases("nulls")
def test_nulls(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data_file, over, field, match):
    _refused(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, field, match, data_file)


@_cases("missing_arguments")
def test_missing_arguments(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data_file, over, field, match):
    _refused(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, field, match, data_file)


def test_a_range_past_half_under_the_listing_floor_is_said_and_the_papers_default_is_not(
        caplog, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data_file):
    """e ~ U[1, L] with the default listing floor: every shift past L/2 compares nothing, so about half the steps
    trained CE alone without a word (Table 7's setting (4) needs loss.min_context: none). The default [1, L/2]
    draws e = L/2, empty by the listing's design, and is not warned about."""
    from torchtune_longshort.training.recipe_config import load_recipe_config

    def said(**over):
        caplog.clear()
        load_recipe_config(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", seq_len=64, **over))
        return caplog.text

    with caplog.at_level("WARNING"):
        assert "31 of the 64 shifts (33..63) leave no position to compare (33 with e = L/2" in said(e_range=[1, "L"])
        assert "leave no position" not in said(e_range=[1, "L/2"])
        assert "leave no position" not in said(e_range=[1, "L"], **{"loss.min_context": "none"})
