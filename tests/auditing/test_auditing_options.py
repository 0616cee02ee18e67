"""auditing/options.py: audit takes convert's rule options and checks them as convert does, plus
how many divergences of a step to list (0 or more; None lists all)."""
from __future__ import annotations

import pytest

from rollout_cli.auditing.options import DEFAULT_MAX_DIVERGENCES, AuditOptions
from rollout_cli.core.errors import UsageError


def test_the_rule_checks_apply():
    with pytest.raises(UsageError, match="--rollout-id-scope"):
        AuditOptions(rollout_id_scope="nope").check()
    with pytest.raises(UsageError, match="--slime-compat needs --rollout-batch-size"):
        AuditOptions(slime_compat=True).check()


def test_max_divergences():
    assert AuditOptions().max_divergences == DEFAULT_MAX_DIVERGENCES == 100
    for ok in (0, 5, None):
        AuditOptions(max_divergences=ok).check()
    with pytest.raises(UsageError, match="--max-divergences: expected 0 or more"):
        AuditOptions(max_divergences=-1).check()
