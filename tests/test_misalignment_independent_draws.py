"""The misalignment task draws its two suffix lengths independently (paper Eq. 4: l1, l2 ~ U[L/2, L] each).

A hand mutant of misalignment.task.misalignment_dataset drawing one length for both (``l1 = l2 = randint(...)``)
survived test_misalignment_task and test_misalignment_task_suffix_range (mutants27): every row then compared a
suffix with itself, and each divergence read 0 at every length. The reference is the closed form of two independent
uniform draws over {2, 3, 4} (L = 4): P(l1 == l2) = 1/3, so 30 rows hold about 10 equal pairs and every one of the
9 pairs is possible; one shared draw makes all 30 equal.
"""

from __future__ import annotations


def test_l1_and_l2_are_two_draws(sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.eval.tasks.misalignment.task import misalignment_dataset

    text = tmp_path / "words.txt"  # a small local text: the stdlib source tokenizes far more than 30 x 4 tokens
    text.write_text(" ".join(f"word{i} and more text" for i in range(400)))
    rows = misalignment_dataset(max_seq_lengths="4", tokenizer=str(sp_tokenizer_dir), mis_num_samples=30,
                                mis_data_files=str(text), mis_join_documents=True)["test"]
    pairs = [(r["l1"], r["l2"]) for r in rows]
    equal = sum(a == b for a, b in pairs)
    # Binomial(30, 1/3): mean 10; 20 or more has probability about 1e-4 (and the draws are seeded)
    assert equal < 20, pairs
    assert {a for a, _ in pairs} | {b for _, b in pairs} <= {2, 3, 4}
