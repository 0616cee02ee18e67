"""What `inspect` is asked to look at: convert's id and reward rules (RuleOptions, for dumps),
the split, and how many anomalies of each kind to keep."""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import UsageError
from ..core.options import RuleOptions
from ..core.layout import SPLITS

DEFAULT_MAX_ANOMALIES = 100  # stored per kind; counts are always complete


@dataclass
class InspectOptions(RuleOptions):
    """The id and reward rules of `convert` (dumps only), plus what to look at."""

    split: str = "train"
    max_anomalies: int | None = DEFAULT_MAX_ANOMALIES  # per kind; None = all
    # --check-template: compare stored tokens with the chat template re-rendered (inspection/template_check.py)
    check_template: bool = False
    chat_template: str | None = None  # --chat-template FILE; None: the tokenizer folder's own

    def check(self) -> None:
        super().check()
        if self.split not in SPLITS:
            raise UsageError(f"--split: expected one of {', '.join(SPLITS)}")
        if self.max_anomalies is not None and self.max_anomalies < 0:
            raise UsageError("--max-anomalies: expected 0 or more")
        if self.check_template and not self.tokenizer:
            raise UsageError("--check-template needs --tokenizer PATH (the run's tokenizer)")
        if self.chat_template is not None and not self.check_template:
            raise UsageError("--chat-template applies to --check-template")

    def id_reward_options(self) -> dict:
        """The id and reward settings, as `summary.options` shows them for dumps."""
        d = self.rule_options()
        if not self.slime_compat:  # inspect's JSON names slime_compat only when it is on
            d.pop("slime_compat")
        return d
