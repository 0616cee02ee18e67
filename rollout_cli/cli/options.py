"""The options several commands share, each declared once: flag, help, panel and metavar. A
command names the parameter with the alias as its type and the library dataclass's field as its
default (`steps: Steps = RULES.steps`), so the default lives in core/options.py alone. The choice
lists in the help come from core/choices.py.

The id and reward rules are one group (`rule_options`): every command that computes rewards or
ids takes all of them, with the same help and the defaults of core.options.RuleOptions, and
receives them as one RuleOptions."""
from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from enum import Enum
from typing import Annotated, Callable, List, Optional

import typer

from ..core.choices import Estimator, PrimeRlSubset, RewardBaseline, Scope, SiblingReward, values
from ..core.options import RULE_FIELDS, RuleOptions
from ..inputs.registry import FORMATS

RULES = RuleOptions()  # the defaults of the id and reward options

# Help panels. A panel holding --disable-grpo-std-normalization (32 characters) may use metavars
# of at most 2 (rich shares 80 columns between the name and the help text): see tests/cli.
REWARDS = "Rewards"
NORMALISATION = "Normalisation"
ROLLOUT_IDS = "Rollout ids"
INPUTS = "Inputs"
VALIDATION = "Validation"
OUTPUT = "Output"
EXECUTION = "Execution"
VIEW = "View"
GATES = "Gates"


def one_of(choices: type[Enum]) -> str:
    """'a, b or c': a choice set for help text."""
    v = values(choices)
    return ", ".join(v[:-1]) + " or " + v[-1] if len(v) > 1 else v[0]


def per_value(described: dict[Enum, str]) -> str:
    """'a: what a does; b: ...' for every value of one choice Enum (all of them, in order)."""
    (kind,) = {type(c) for c in described}
    assert list(described) == list(kind), f"{kind.__name__}: describe every value, in order"
    return "; ".join(f"{c.value}: {text}" for c, text in described.items()) + "."


AdvantageEstimator = Annotated[Estimator, typer.Option(
    "--advantage-estimator", metavar="NAME", rich_help_panel=REWARDS,
    help=f"As slime's flag: {one_of(Estimator)}. Decides mean-centring and std-scaling.")]
RewardKey = Annotated[Optional[str], typer.Option(
    "--reward-key", metavar="KEY", rich_help_panel=REWARDS,
    help="Take this key from dict rewards (and from a dict metadata.raw_reward).")]
DisableRewardsNormalization = Annotated[bool, typer.Option(
    "--disable-rewards-normalization", rich_help_panel=NORMALISATION, help="Keep rewards as they are.")]
DisableGrpoStdNormalization = Annotated[bool, typer.Option(
    "--disable-grpo-std-normalization", rich_help_panel=NORMALISATION, help="Mean-centre only: no std-scaling.")]
SlimeCompat = Annotated[bool, typer.Option(
    "--slime-compat", rich_help_panel=NORMALISATION,
    help="Reproduce slime's position-based reward normalisation bit for bit (needs "
         "--rollout-batch-size and torch).")]
RolloutBatchSize = Annotated[Optional[int], typer.Option(
    "--rollout-batch-size", metavar="N", rich_help_panel=NORMALISATION, help="Prompts per step; used by --slime-compat.")]

RolloutIdScope = Annotated[Scope, typer.Option(
    "--rollout-id-scope", metavar="SCOPE", rich_help_panel=ROLLOUT_IDS,
    help=per_value({Scope.strict: "an explicit id in two prompt groups is an error",
                    Scope.step: "merge them, as slime does",
                    Scope.group: "ids are unique within a prompt group only"}))]
NSamplesPerPrompt = Annotated[Optional[int], typer.Option(
    "--n-samples-per-prompt", metavar="N", rich_help_panel=ROLLOUT_IDS,
    help="Group size: samples without group_index form groups of N in input order; "
         "the size inspect expects; n of --slime-compat (default 1).")]

RewardBaselineOpt = Annotated[RewardBaseline, typer.Option(
    "--reward-baseline", metavar="UNIT", rich_help_panel=REWARDS,
    help="What counts once in a prompt group's reward mean and std: "
         + per_value({RewardBaseline.sample: "each sample",
                      RewardBaseline.rollout: "each rollout (its samples share one reward; not with --slime-compat)"}))]
SiblingRewardOpt = Annotated[SiblingReward, typer.Option(
    "--sibling-reward", metavar="RULE", rich_help_panel=REWARDS,
    help="Under --reward-baseline rollout, a rollout whose samples carry different rewards: "
         + per_value({SiblingReward.error: "exit 3", SiblingReward.mean: "take their mean"}))]

MaxStaleness = Annotated[Optional[int], typer.Option(
    "--max-staleness", metavar="N", rich_help_panel=VALIDATION,
    help="Reject whole rollouts whose oldest weight version is more than N steps behind their step "
         "(rejects report, rule weight_versions.stale); a usage error for inputs whose weight versions "
         "say no step (docs/rules.md).")]

ImageTokenId = Annotated[Optional[int], typer.Option(
    "--image-token-id", metavar="ID", rich_help_panel=VALIDATION,
    help="The image placeholder token: a sample whose prompt holds it must carry pixel values, as many "
         "placeholders as its image_grid_thw gives (prod(t,h,w)/merge^2 per image); others are invalid. "
         "Default with --tokenizer: its image placeholder token (e.g. <|image_pad|>), if it adds one.")]
SpatialMergeSize = Annotated[int, typer.Option(
    "--spatial-merge-size", metavar="M", rich_help_panel=VALIDATION,
    help="The image processor's spatial merge size, for --image-token-id.")]

# The rule group: a parameter per field of RULE_FIELDS, in the order the help lists them; a
# --disable-* switch negates the field it names.
RULE_PARAMS = {
    "advantage_estimator": AdvantageEstimator,
    "reward_key": RewardKey,
    "disable_rewards_normalization": DisableRewardsNormalization,
    "disable_grpo_std_normalization": DisableGrpoStdNormalization,
    "slime_compat": SlimeCompat,
    "rollout_batch_size": RolloutBatchSize,
    "rollout_id_scope": RolloutIdScope,
    "reward_baseline": RewardBaselineOpt,
    "sibling_reward": SiblingRewardOpt,
    "n_samples_per_prompt": NSamplesPerPrompt,
    "max_staleness": MaxStaleness,
    "image_token_id": ImageTokenId,
    "spatial_merge_size": SpatialMergeSize,
}


def rule_field(param: str) -> str:
    """The RuleOptions field a rule parameter sets."""
    return param[len("disable_"):] if param.startswith("disable_") else param


assert sorted(map(rule_field, RULE_PARAMS)) == sorted(RULE_FIELDS), "declare every rule option once"


def rule_default(param: str):
    """A rule parameter's default: its field's in RuleOptions (negated for --disable-*; as the
    choice Enum for a choice)."""
    value = getattr(RULES, rule_field(param))
    if param.startswith("disable_"):
        return not value
    kind = typing.get_args(RULE_PARAMS[param])[0]
    return kind(value) if isinstance(kind, type) and issubclass(kind, Enum) else value


def rule_options(command: Callable) -> Callable:
    """Give `command` the rule group: its parameter `rules` becomes the options of RULE_PARAMS
    (where it stands, so the help keeps the command's order), and the command is called with
    `rules`, a RuleOptions of their values (its input fields at their defaults)."""
    sig = inspect.signature(command, eval_str=True)
    own = list(sig.parameters.values())
    at = [p.name for p in own].index("rules")
    group = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=alias,
                               default=rule_default(name)) for name, alias in RULE_PARAMS.items()]
    params = own[:at] + group + own[at + 1:]

    @functools.wraps(command)
    def with_rules(**kwargs):
        given = {name: kwargs.pop(name) for name in RULE_PARAMS}
        return command(**kwargs, rules=RuleOptions(**option_values(RuleOptions, given)))

    with_rules.__signature__ = sig.replace(parameters=params)
    with_rules.__annotations__ = {p.name: p.annotation for p in params}
    return with_rules


def options_of(cls: type, rules: RuleOptions, params: dict, **extra):
    """`cls` (RuleOptions or a subclass) from a command's rule group `rules`, its other
    parameters named as fields (its `locals()`) and `extra`."""
    values = {k: getattr(rules, k) for k in RULE_FIELDS}
    values.update(option_values(cls, params))
    values.update(extra)
    return cls(**values)


Steps = Annotated[Optional[str], typer.Option(
    "--steps", metavar="A:B", rich_help_panel=INPUTS, help="Select steps: A:B (inclusive), A:, :B or A.")]
Step = Annotated[Optional[int], typer.Option(
    "--step", metavar="N", rich_help_panel=INPUTS, help="Step number of a single input (required for stdin).")]
TrustPickle = Annotated[bool, typer.Option(
    "--trust-pickle", rich_help_panel=INPUTS,
    help="Allow .pt dumps that need full unpickling, which can run code: only for files you trust.")]
MaxLineBytes = Annotated[int, typer.Option(
    "--max-line-bytes", metavar="N", rich_help_panel=INPUTS,
    help="Refuse a line file (JSONL, plain or compressed) holding a line longer than N bytes "
         "(exit 3 naming file and line), before reading it whole.")]
MaxStorageBytes = Annotated[int, typer.Option(
    "--max-storage-bytes", metavar="N", rich_help_panel=INPUTS,
    help="Refuse a .pt whose archive declares a record larger than N bytes (exit 3), or one "
         "compressed over 1000x, before reading it.")]
PrimeRlSubsetOpt = Annotated[PrimeRlSubset, typer.Option(
    "--prime-rl-subset", metavar="SET", rich_help_panel=INPUTS,
    help="Which traces of a prime-rl step to read: "
         + per_value({PrimeRlSubset.effective: "the episodes sent to the trainer",
                      PrimeRlSubset.all: "every episode that arrived, errored ones as removed samples"}))]

Tokenizer = Annotated[Optional[str], typer.Option(
    "--tokenizer", metavar="PATH", rich_help_panel=INPUTS,
    help="The run's tokenizer: a tokenizer.json or a folder holding one (read by the tokenizers "
         "library, no network). Tokenizes text dumps (rows not token-exact) and shows token ids as text.")]

InputFormat = Annotated[Optional[str], typer.Option(
    "--input-format", metavar="NAME", rich_help_panel=INPUTS,
    help=f"Read every input with this reader: {', '.join(FORMATS)} (default: recognised from "
         "each file's path and content).")]

MaxAnomalies = Annotated[int, typer.Option(
    "--max-anomalies", metavar="N", rich_help_panel=VIEW,
    help="Keep at most N anomalies of each kind (the counts stay complete; 0: all).")]

Json = Annotated[bool, typer.Option("--json", help="Print the result as one JSON object on stdout.")]
Quiet = Annotated[bool, typer.Option("-q", "--quiet", help="No summary.")]
Verbose = Annotated[bool, typer.Option("-v", "--verbose", help="Tracebacks for internal errors.")]
OverwriteOwn = Annotated[bool, typer.Option(
    "--overwrite", rich_help_panel=OUTPUT,
    help="Replace a DEST this command wrote earlier (swapped in whole); any other folder is never replaced.")]
Wait = Annotated[Optional[float], typer.Option(
    "--wait", metavar="SECS", rich_help_panel=OUTPUT,
    help="While another process writes the output, wait up to SECS seconds for it to "
         "finish (default: exit 8 at once).")]


def _fail_on_help(ctx: typer.Context, value: Optional[List[str]]) -> Optional[List[str]]:
    """`--fail-on help`: the names this command can gate on, then exit 0 (eager: before the
    arguments are checked, so `rollout-cli audit --fail-on help` needs no input)."""
    if value and "help" in value and not ctx.resilient_parsing:
        from ..gates import names_help

        print(names_help(ctx.command.name or ""), end="")
        raise typer.Exit()
    return value


# The gates of inspect and audit (gates/, cli/gating.py), one group in both commands' help.
FailOn = Annotated[Optional[List[str]], typer.Option(
    "--fail-on", metavar="EXPR", rich_help_panel=GATES, show_default=False, is_eager=True,
    callback=_fail_on_help,
    help="Exit 7 when NAME OP NUMBER holds, as 'step.truncation_rate > 0.2' (OP: < <= > >= == "
         "!=; a null or NaN figure fails too); repeat for more. --fail-on help lists the names.")]
ChecksFile = Annotated[Optional[str], typer.Option(
    "--checks", metavar="FILE", rich_help_panel=GATES, show_default=False,
    help="A TOML file of gates: fail_on = [...] for every command, and an inspect or audit table "
         "of its own fail_on; --fail-on adds to them (docs/ci.md).")]
JunitXml = Annotated[Optional[str], typer.Option(
    "--junit-xml", metavar="PATH", rich_help_panel=GATES, show_default=False,
    help="Write each gate as a JUnit XML testcase, passed or failed, for CI test reports.")]


def settings_of(cls: type, rules: RuleOptions, params: dict, *leave: str) -> dict:
    """The keyword settings of a library function taking `cls`'s fields: `options_of` as a
    dict, without the fields in `leave` (those the function names itself)."""
    return {k: v for k, v in vars(options_of(cls, rules, params)).items() if k not in leave}


def option_values(options: type, params: dict) -> dict:
    """Keyword arguments for the dataclass `options` from a command's parameters (its `locals()`):
    every parameter named as a field, choices as their values, and the two --disable-*
    switches turned into the fields they negate."""
    fields = {f.name for f in dataclasses.fields(options)}
    out = {}
    for name, value in params.items():
        negated = name.startswith("disable_") and name[len("disable_"):] in fields
        field = name[len("disable_"):] if negated else name
        if field not in fields:
            continue
        out[field] = (not value) if negated else value.value if isinstance(value, Enum) else value
    return out
