"""home_folder.no_home_words names the user id the password database lacks: this process's real user id, as the
kernel reports it in ``/proc/self/status``'s ``Uid:`` line (its first field)."""

import sys

import pytest

from torchtune_longshort.home_folder import no_home_words


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status is Linux's")
def test_the_words_name_this_processs_user_id():
    with open("/proc/self/status") as f:
        uid = next(line.split()[1] for line in f if line.startswith("Uid:"))
    assert f"user id {uid} has no home folder" in no_home_words()
