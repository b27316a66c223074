"""The passkey task's data messages name the user's key and the fix (before: "data_files='<f>' does not exist (no
such file, folder or glob match)" and "data_files: <f> holds no records" for passkey_haystack_files, a key the user
never set; "passkey haystack source='hf' gave no text"; "passkey_data_files=... holds no sample with length=1024",
no fix; "passkey_data_files='<f>': no such file", no fix either). Each message is matched whole, on one line."""

from __future__ import annotations

import re

import pytest

from torchtune_longshort.eval.tasks.passkey import task as passkey


def _written(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def _no_text(monkeypatch):
    monkeypatch.setattr(passkey, "iter_texts", lambda **kwargs: iter([" \n\n"]))
    return passkey.haystack_units("hf")


CASES = {
    "haystack file missing": (lambda t, m: passkey.haystack_units("local", str(t / "nope.txt")),
                              r"passkey_haystack_files='.*/nope\.txt' does not exist \(no such file, folder or glob "
                              r"match\): name files that exist"),
    "haystack file empty": (lambda t, m: passkey.haystack_units("local", _written(t, "empty.txt", "")),
                            r"passkey_haystack_files: .*/empty\.txt holds no records \(an empty file\); name data to "
                            r"read"),
    "haystack without text": (lambda t, m: _no_text(m),
                              r"passkey_haystack='hf' gave no text: name another haystack \(filler, the default, "
                              r"reads no data\)"),
    "prompts file missing": (lambda t, m: passkey._rows_from_files(str(t / "nope.jsonl"), 1024, {}),
                             r"passkey_data_files='.*/nope\.jsonl': no such file: name files that exist"),
    "prompts of other lengths": (lambda t, m: passkey._rows_from_files(_written(t, "p.jsonl", '{"length": 64}\n'),
                                                                       1024, {}),
                                 r"passkey_data_files='.*/p\.jsonl' holds no sample with length=1024: write samples "
                                 r"of that length \(write_passkey_jsonl\), or ask for the lengths it holds "
                                 r"\(passkey_max_seq_lengths\)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_passkey_data_message_names_the_key_and_fix(tmp_path, monkeypatch, case):
    call, pattern = CASES[case]
    with pytest.raises(ValueError) as info:
        call(tmp_path, monkeypatch)
    assert re.fullmatch(pattern, str(info.value)), str(info.value)


@pytest.mark.parametrize("names", [["nope.txt"], ["none/*.txt"], ["hay.txt", "nope.txt"]])
def test_haystack_files_that_name_nothing_are_refused_before_the_run(tmp_path, names):
    """longshort-eval --tasks longshort_passkey --metadata '{"passkey_haystack": "local", "passkey_haystack_files":
    "/nope.txt"}' loaded the model, scored every length NaN and exited 0, where a missing ppl_data_files is refused by
    the --metadata check before lm-eval starts; passkey_haystack_files is now checked there too, with the reason the
    task gives (the reference: haystack_units' message for the same value)."""
    from torchtune_longshort.eval.tasks import check_metadata_values

    (tmp_path / "hay.txt").write_text("The grass is green.\n")
    files = [str(tmp_path / n) for n in names]
    value = files[0] if len(files) == 1 else files
    with pytest.raises(ValueError) as task:
        passkey.haystack_units("local", value)
    with pytest.raises(ValueError) as check:
        check_metadata_values({"passkey_haystack": "local", "passkey_haystack_files": value})
    assert str(check.value) == str(task.value)
    check_metadata_values({"passkey_haystack_files": str(tmp_path / "hay.txt")})  # a file there: no refusal


def test_the_eval_command_refuses_a_missing_haystack_file_before_lm_eval_starts(tmp_path):
    pytest.importorskip("lm_eval")
    from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv

    metadata = f'{{"passkey_haystack": "local", "passkey_haystack_files": "{tmp_path / "nope.txt"}"}}'
    with pytest.raises(ValueError) as info:
        check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_passkey", "--metadata", metadata]))
    assert re.fullmatch(r"--metadata passkey_haystack_files='.*/nope\.txt' does not exist \(no such file, folder or glob "
                        r"match\): name files that exist", str(info.value)), str(info.value)


def test_a_local_haystack_too_short_for_a_length_is_refused_before_lm_eval_starts(tmp_path, sp_tokenizer_dir):
    """longshort-eval --tasks longshort_passkey --metadata '{"passkey_haystack": "local", "passkey_haystack_files":
    "hay.txt", "max_seq_lengths": [256]}' with a 3-line hay.txt loaded the model, then scored the length NaN ('the
    haystack has only 3 units (79 tokens)') and exited 0; the command's check now refuses it before lm-eval starts,
    naming the file, the prompt it makes and the length. The reference: the task's own dataset, built at each length
    around the haystack's last one (NaN there exactly where the check refuses)."""
    pytest.importorskip("lm_eval")
    import json

    from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv

    hay = _written(tmp_path, "hay.txt", "The grass is green.\nThe sky is blue.\n\nHere we go, there and back.\n")
    settings = {"passkey_haystack": "local", "passkey_haystack_files": hay, "passkey_depths": [0, 50, 100],
                "passkey_num_samples": 2, "tokenizer": str(sp_tokenizer_dir)}

    def task_unscored(length):
        rows = passkey.passkey_dataset(**settings, max_seq_lengths=[length])["test"]
        return any("haystack has only" in row["error"] for row in rows)

    def refused(length):
        metadata = json.dumps({**settings, "passkey_max_seq_lengths": [16, length]})
        try:
            check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_passkey", "--metadata",
                                          metadata]))
        except ValueError as e:
            return str(e)
        return None

    lo, hi = 170, 400  # the longest length the haystack fills (the task's prompt alone is about 150 tokens here)
    assert not task_unscored(lo) and task_unscored(hi)
    while hi - lo > 1:
        lo, hi = (lo, (lo + hi) // 2) if task_unscored((lo + hi) // 2) else ((lo + hi) // 2, hi)
    last = lo
    for length in (last - 1, last, last + 1, last + 3):
        assert bool(refused(length)) == task_unscored(length), length
    assert re.fullmatch(rf"--metadata passkey_haystack_files='{re.escape(hay)}': its haystack \(3 lines\) makes "
                        rf"a passkey prompt of \d+ tokens with this tokenizer, and length {last + 1} needs one of more "
                        rf"than {last + 1 - 16} \(16 kept for the answer\): give a haystack of more text, or shorter "
                        r"lengths \(passkey_max_seq_lengths\)", refused(last + 1))
