"""A .txt of the evaluation's local data that is not UTF-8 (a Latin-1 file in ppl_data_files) is scored as before,
with U+FFFD for its bytes, and said once per file with the number of bytes replaced (data/replaced_text.py); it was
scored without a word, where training's reader refuses it."""

import logging

from torchtune_longshort.eval.tasks.common.local_files import read_local


def test_a_latin1_text_file_is_read_as_before_and_its_replaced_bytes_said_once(tmp_path, caplog):
    corp = tmp_path / "corp"
    corp.mkdir()
    raw = b"caf\xe9 cr\xe8me br\xfbl\xe9e\n"
    (corp / "latin.txt").write_bytes(raw)
    (corp / "utf8.txt").write_text("caf\u00e9\n", encoding="utf-8")
    # the reference: each Latin-1 byte above 0x7f here stands alone, one byte Python's UTF-8 decoder cannot read
    replaced = len(raw.decode("latin-1")) - len(raw.decode("utf-8", "ignore"))
    with caplog.at_level(logging.WARNING):
        for _ in range(2):  # each length of a task reads its files again
            docs = list(read_local(str(corp), "text", False, "ppl_text_field", "ppl_data_files"))
            assert docs == [raw.decode("utf-8", "replace"), "caf\u00e9\n"]  # scored as before
    said = [r.getMessage() for r in caplog.records if "replacement characters" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith(f"{corp / 'latin.txt'}: {replaced} bytes that are not utf-8 (the first: invalid "
                              "continuation byte at byte 3)")
    assert "iconv" in said[0]
