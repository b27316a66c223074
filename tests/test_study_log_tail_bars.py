"""A study's fine-tune killed by SIGKILL after step 2 was told 'recipe killed by SIGKILL (exit 137; ...): longshort:
33%|###3      | 2/6 [00:00<00:01,  3.32it/s, e=48, loss=6.0713, mis=12.2]', and the run's ``log_tail`` held that bar's
redraws: ``log_tail`` took out tqdm lines ending 'it/s]' only, where the recipe's bar carries a postfix after its
rate. The reference: a log written by tqdm itself (a bar with a postfix, as the recipe draws it, and one with no
total) around lines the test printed, which are what the tail must hold, in order."""

from __future__ import annotations

from tqdm import tqdm

from torchtune_longshort.study.stages import error_line, log_tail

PRINTED = ["Writing logs to out/train/logs/log_1.txt",
           "RoPE method 'clex' is not representable in transformers' llama config",
           "Checkpoint for step 2 written to out/train/step_2 (6.8 MiB)"]


def test_the_tail_of_a_log_drawn_over_by_tqdm_holds_the_printed_lines_alone(tmp_path):
    path = tmp_path / "train.log"
    with open(path, "w") as f:
        f.write(PRINTED[0] + "\n")
        bar = tqdm(total=6, desc="longshort", file=f, mininterval=0, miniters=1, ascii=False)
        # the second redraw shorter than the first, which tqdm pads with spaces (the line printed next followed them:
        # ' RoPE method ...' in the tail where a slower machine drew a shorter rate, CI at 397602a6)
        for step, loss in ((1, "5.900000"), (2, "6.0")):
            bar.set_postfix(e=45 + step, loss=loss, mis=12.2, refresh=False)  # drawn by the update
            bar.update(1)
        f.write(PRINTED[1] + "\n")  # printed straight after a redraw, on its line, as the walk's log held it
        f.write(PRINTED[2] + "\n")
        bar.refresh()  # the redraw the kill left last
        with tqdm(desc="runs", file=f, mininterval=0, position=0) as other:  # no total: '0it [00:00, ?it/s]'
            other.update(0)
    tail = log_tail(path)
    assert tail.splitlines() == PRINTED, tail
    assert error_line(tail) == PRINTED[-1]
