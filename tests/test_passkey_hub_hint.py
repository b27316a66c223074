"""HF_ENDPOINT=http://127.0.0.1:9 longshort-eval run ... --tasks longshort_passkey --metadata
'{"passkey_haystack":"pg19",...}' (passkey alone, the hub out of reach) gave the reason '... or from local files
(source: json, data_files: ...)', the training YAML's keys, none of which passkey reads; its reason now names
passkey's own keys, and following them reads the haystack."""

import re

from hub_subprocess import run_without_hub


SCRIPT = r"""
from torchtune_longshort.eval.tasks.passkey.task import haystack_units
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError
try:
    haystack_units("pg19")
    print("read")
except TaskDataError as e:
    print(e)
"""


def test_passkey_from_an_unreachable_hub_names_its_own_local_keys(tmp_path):
    # offline mode: the same reason as a hub out of reach, without huggingface_hub's retries
    reason = run_without_hub(SCRIPT, tmp_path, 60, HF_HUB_OFFLINE="1").strip().splitlines()[-1]
    assert "emozilla/pg19-test" in reason, reason
    hint = reason[reason.index("local files ("):]
    named = {}
    for key, value in re.findall(r"(passkey_\w+)=(\S+?)(?=[ ,)])", hint):
        named.setdefault(key, value)  # the first way it names: local files
    assert set(named) == {"passkey_haystack", "passkey_haystack_files"}, reason
    # the reference: passkey's own reader given what the reason says, a haystack file of the user's
    from torchtune_longshort.eval.tasks.passkey.task import haystack_units

    hay = tmp_path / "hay.txt"
    hay.write_text("first line of hay\nsecond line of hay\n")
    assert named["passkey_haystack"] == "local"
    assert haystack_units(named["passkey_haystack"], str(hay)) == ["first line of hay", "second line of hay"]
