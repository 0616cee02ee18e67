"""rollout_cli.inputs.slime_pt.versions: how far behind its rollout step a slime weight version
is, and the slime-shaped formats that declare it."""
from __future__ import annotations

import pytest

from rollout_cli.inputs.registry import FORMATS
from rollout_cli.inputs.slime_pt.versions import versions_behind


@pytest.mark.parametrize("step, version, lag", [
    (0, "1", 0),  # the update before the first rollout: step 0's own policy
    (5, "6", 0),  # a synchronous run
    (5, "5", 1),  # train_async.py: generated while step 4 trained
    (5, "2", 4),  # a partial rollout resumed across updates
    (5, "7", -1),  # ahead of the step
    (5, "v3", None), (5, "", None), (5, "1.5", None), (5, "-1", None), (5, "٣", None),
])
def test_a_version_is_the_count_of_weight_updates(step, version, lag):
    assert versions_behind(step, version) == lag


def test_the_slime_shaped_formats_declare_it_and_others_do_not():
    lagged = {name for name, f in FORMATS.items() if f.version_lag is not None}
    assert {"pt", "jsonl", "parquet"} <= lagged
    assert FORMATS["pt"].versions_behind(3, "2") == 2
    assert FORMATS["nemo_rl"].version_lag is None and FORMATS["nemo_rl"].versions_behind(3, "2") is None
