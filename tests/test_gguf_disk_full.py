"""``--gguf F --out DIR`` whose disk filled while the converted folder was written (past the room check: another
process wrote meanwhile, a quota): the line said 'no space left on the disk: No space left on device (os error 28);
free space there, ...', naming neither the file nor the folder (safetensors' error names none; a 60 KiB-free tmpfs,
the walk's). It now names ``--out`` and its disk's room. The full disk is simulated by patching the model's
``save_pretrained`` to raise what safetensors raised on the tmpfs (a real tmpfs needs root)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("gguf")

from test_gguf_files import _refused, sentencepiece_gguf  # noqa: E402


def test_a_disk_that_fills_while_the_folder_is_written_is_named(tmp_path, sp_tokenizer_dir, capsys, monkeypatch):
    from safetensors import SafetensorError
    from transformers import PreTrainedModel

    def full(self, *args, **kwargs):  # what safetensors' save_file raised on the walk's full tmpfs, word for word
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full)
    gguf = sentencepiece_gguf(tmp_path / "m.gguf", (Path(sp_tokenizer_dir) / "tokenizer.model").read_bytes())
    out = tmp_path / "new" / "conv"  # the --out _refused passes; nothing of it (nor new/) left
    line = _refused(gguf, tmp_path, capsys, f"no space left on the disk writing {out} (")
    assert line.endswith("[Errno 28] No space left on device; free space there, or write to a disk with room, and "
                         "run again"), line
