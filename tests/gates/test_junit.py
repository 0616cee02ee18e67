"""rollout_cli.gates.junit: the report parsed back (testsuites > testsuite with its counts >
one testcase per check, a failure naming the value and the crossing steps, skipped entries),
written when every check passes, the same bytes for the same checks, and exit 6 when it cannot
be written."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from rollout_cli.core.errors import ExitCode, OutputError
from rollout_cli.gates import evaluate, junit_xml, plan, write_junit

RESULT = {"summary": {"truncation_rate": 0.15, "anomaly_counts": {},
                      "per_step": [{"step": 1, "truncation_rate": 0.1875}, {"step": 3, "truncation_rate": 0.3}]}}


def _report(tmp_path, flags, file_text=None):
    f = None
    if file_text is not None:
        f = tmp_path / "gates.toml"
        f.write_text(file_text)
        f = str(f)
    p = plan("inspect", flags, f)
    checks = evaluate(p, RESULT)
    out = tmp_path / "reports" / "gates.xml"  # its folder is made
    write_junit(str(out), p, checks)
    return ET.parse(out).getroot(), out, p, checks


def test_parsed_back(tmp_path):
    root, _, _, _ = _report(tmp_path, ["step.truncation_rate > 0.15", "truncation_rate > 0.2", "anomalies.mixed_ids != 0"],
                            'fail_on = ["mismatch.k3 > 0.1"]\n')
    assert root.tag == "testsuites"
    (suite,) = root
    assert suite.tag == "testsuite" and suite.get("name") == "rollout-cli inspect"
    for el in (root, suite):
        assert {k: el.get(k) for k in ("tests", "failures", "errors", "skipped")} == \
            {"tests": "4", "failures": "1", "errors": "0", "skipped": "1"}
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["step.truncation_rate > 0.15", "truncation_rate > 0.2",
                                              "anomalies.mixed_ids != 0", "mismatch.k3 > 0.1"]
    assert {c.get("classname") for c in cases} == {"rollout-cli.inspect"}
    (fail,) = cases[0]
    assert fail.tag == "failure"
    assert fail.get("message") == ("check FAILED: step.truncation_rate > 0.15: value 0.3 (largest of 2), "
                                   "threshold 0.15; crossed at step 1 (0.1875), step 3 (0.3)")
    assert fail.text.splitlines() == ["value: 0.3", "threshold: > 0.15", "crossed at: step 1 (0.1875), step 3 (0.3)"]
    assert list(cases[1]) == [] and list(cases[2]) == []  # passed
    (skip,) = cases[3]
    assert skip.tag == "skipped" and "inspect has no figure 'mismatch.k3'" in skip.get("message")


def test_written_when_every_check_passes(tmp_path):
    root, _, _, _ = _report(tmp_path, ["truncation_rate > 0.2"])
    (suite,) = root
    assert (suite.get("tests"), suite.get("failures")) == ("1", "0")
    assert [list(c) for c in suite] == [[]]


def test_null_figure_is_a_failure(tmp_path):
    p = plan("inspect", ["rows > 0"])
    (suite,) = ET.fromstring(junit_xml(p, evaluate(p, RESULT)))
    (case,) = suite
    assert case[0].text.splitlines()[0] == "value: null (a null or NaN figure fails)"


def test_same_checks_same_bytes(tmp_path):
    _, out, p, checks = _report(tmp_path, ["step.truncation_rate > 0.15"])
    assert out.read_bytes() == junit_xml(p, checks) == junit_xml(p, evaluate(p, RESULT))
    assert out.read_bytes().startswith(b"<?xml version='1.0' encoding='utf-8'?>\n<testsuites")


def test_unwritable_path_is_exit_6(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = plan("inspect", ["rows > 0"])
    with pytest.raises(OutputError, match=f"--junit-xml {blocker}/gates.xml: cannot write it") as e:
        write_junit(str(blocker / "gates.xml"), p, evaluate(p, RESULT))
    assert e.value.exit_code == ExitCode.OUTPUT_ERROR
