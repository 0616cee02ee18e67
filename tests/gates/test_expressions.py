"""rollout_cli.gates.expressions: `NAME OP NUMBER` parsed, every OP, unknown names and malformed
expressions named with the closest valid names, null and NaN figures failing, and the property
that `NAME > v` fails exactly when the JSON figure is above v."""
from __future__ import annotations

import json
from functools import lru_cache

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from inspect_samples import DATA
from rollout_cli.core.errors import ExitCode, UsageError
from rollout_cli.gates import catalogue, evaluate
from rollout_cli.gates.api import Plan
from rollout_cli.gates.expressions import crosses, known, parse

INSPECT = catalogue("inspect")


def p(text: str, command: str = "inspect"):
    return parse(text, catalogue(command), command, "--fail-on")


@pytest.mark.parametrize("op, below, equal, above", [
    ("<", True, False, False),
    ("<=", True, True, False),
    (">", False, False, True),
    (">=", False, True, True),
    ("==", False, True, False),
    ("!=", True, False, True),
])
def test_every_op_fails_when_its_condition_holds(op, below, equal, above):
    c = p(f"truncation_rate {op} 0.2")
    assert (c.op, c.threshold, c.name) == (op, 0.2, "truncation_rate")
    assert [crosses(v, c.op, c.threshold) for v in (0.1, 0.2, 0.3)] == [below, equal, above]


@pytest.mark.parametrize("text, expr, threshold", [
    ("step.truncation_rate>0.2", "step.truncation_rate > 0.2", 0.2),
    ("  anomalies.mixed_ids   !=   0 ", "anomalies.mixed_ids != 0", 0),
    ("rewards.reward.std <= -1.5e-3", "rewards.reward.std <= -1.5e-3", -1.5e-3),
    ("rows >= .5", "rows >= .5", 0.5),
    ("rows < 12", "rows < 12", 12),
])
def test_spacing_and_numbers(text, expr, threshold):
    c = p(text)
    assert c.expr == expr and c.threshold == threshold
    assert type(c.threshold) is type(threshold)  # an integer written as one stays an int in --json


def test_audit_names_with_a_dot_inside_the_key():
    c = p("mismatch.ratio_below_0.5 > 0.01", "audit")
    assert c.figure.path == ("mismatch", "ratio_below_0.5") and c.figure.entries is not None


@pytest.mark.parametrize("text", ["truncation_rate >> 0.2", "truncation_rate 0.2", "truncation_rate > ", "> 0.2",
                                  "truncation_rate > nan", "truncation_rate > inf", "truncation_rate > 0.2 extra",
                                  "truncation_rate = 0.2", ""])
def test_malformed_expression_exits_2_naming_it_and_the_closest_names(text):
    with pytest.raises(UsageError) as e:
        p(text)
    msg = str(e.value)
    assert e.value.exit_code == ExitCode.USAGE
    assert f"--fail-on {text!r}: expected NAME OP NUMBER, OP one of < <= > >= == !=" in msg
    if text.startswith("truncation_rate"):
        assert "closest: truncation_rate, step.truncation_rate" in msg


def test_overflowing_threshold_is_malformed():
    with pytest.raises(UsageError, match=r"the threshold 1e999 is not a finite number"):
        p("truncation_rate > 1e999")


def test_unknown_name_exits_2_naming_it_and_the_closest_names():
    with pytest.raises(UsageError) as e:
        p("step.trunc_rate > 0.2")
    assert str(e.value) == ("--fail-on 'step.trunc_rate > 0.2': inspect has no figure 'step.trunc_rate'; closest: "
                            "step.truncation_rate, status.truncated, truncation_rate (--fail-on help lists them all)")
    with pytest.raises(UsageError, match=r"audit has no figure 'mismatch.mean_abs_dif'; closest: mismatch.mean_abs_diff"):
        p("mismatch.mean_abs_dif > 0.05", "audit")
    with pytest.raises(UsageError, match=r"no name is close"):
        p("zzzz > 1")


@pytest.mark.parametrize("value", [None, float("nan"), "0.3", True])
@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_null_or_nan_figure_fails_every_op(value, op):
    assert not known(value)
    assert crosses(value, op, 0.2)


def _result(rate, per_step):
    return {"summary": {"truncation_rate": rate, "per_step": [{"step": i, "truncation_rate": r} for i, r in enumerate(per_step)]}}


def test_null_and_nan_figures_fail_their_checks_run_wide_and_per_step():
    pl = Plan("inspect", [p("truncation_rate > 0.5"), p("step.truncation_rate > 0.5")])
    run, step = evaluate(pl, _result(None, [0.1, float("nan"), 0.2, None]))
    assert (run["passed"], run["value"]) == (False, None)
    assert (step["passed"], step["value"]) == (False, None)
    assert step["steps"] == [{"step": 1, "value": None}, {"step": 3, "value": None}]  # NaN shown as null
    json.dumps([run, step], allow_nan=False)  # the checks are valid JSON


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=300, deadline=None)
@given(figure=finite, steps=st.lists(finite, min_size=1, max_size=6), v=finite)
@example(figure=0.2, steps=[0.2, 0.3, -0.0], v=0.2)  # equal is not above
@example(figure=-0.0, steps=[0.0], v=0.0)
def test_greater_than_fails_exactly_when_the_json_figure_is_above_v(figure, steps, v):
    """Through the JSON text, as a CI job reads it: the run-wide check fails iff the figure is
    above v, the per-step one iff some step's is, and it names exactly those steps."""
    result = json.loads(json.dumps(_result(figure, steps)))
    pl = Plan("inspect", [p(f"truncation_rate > {v!r}"), p(f"step.truncation_rate > {v!r}")])
    run, step = evaluate(pl, result)
    assert run["passed"] is not (figure > v)
    assert step["passed"] is not any(s > v for s in steps)
    assert [s["step"] for s in step["steps"]] == [i for i, s in enumerate(steps) if s > v]
    assert step["value"] == max(steps)


@lru_cache(maxsize=None)
def _sample_data_json() -> dict:
    from rollout_cli.inspection import inspect_paths

    return json.loads(json.dumps(inspect_paths([str(DATA / "jsonl")])))


@lru_cache(maxsize=None)
def _template_json() -> dict:
    """The chat-template figures need --check-template: the sample conversation dump's."""
    from rollout_cli.inspection import InspectOptions, inspect_paths

    opts = InspectOptions(tokenizer=str(DATA / "tokenizer"), check_template=True)
    return json.loads(json.dumps(inspect_paths([str(DATA / "chat_drift")], options=opts)))


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(INSPECT)), v=finite)
def test_every_inspect_name_on_sample_data_fails_exactly_when_above_v(name, v):
    r = _template_json() if name.startswith("template.") else _sample_data_json()
    fig = INSPECT[name]
    values = [x for _, x in fig.values(r)]
    assert values and all(known(x) for x in values), name  # sample_data has every figure
    (c,) = evaluate(Plan("inspect", [p(f"{name} > {v!r}")]), r)
    assert c["passed"] is not any(x > v for x in values)

