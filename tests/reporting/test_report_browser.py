"""The report page in a real browser: headless Chromium (Debian's `chromium`) with the network off
opens the sample data's report; no console errors, nothing fetched, every plot drawn, the numbers
shown are inspect's, and the drill-down follows the chosen rollout, group and link.

Chromium is required: without it these tests fail (CI installs it in .ci/run)."""
from __future__ import annotations

import json

import pytest

from cdp_browser import Browser, find_browser
from conftest import SAMPLE_DATA
from rollout_cli.reporting import build_report, read_data

PLOTS = ["plot-reward", "plot-length", "plot-rates", "plot-spr", "dist-length", "dist-reward", "dist-groups", "dist-spr"]


@pytest.fixture(scope="module")
def report_file(tmp_path_factory):
    if find_browser() is None:
        pytest.fail("no Chromium on PATH: apt-get install chromium (the browser test is required, not optional)")
    out = tmp_path_factory.mktemp("report") / "report.html"
    build_report([str(SAMPLE_DATA / "jsonl")], str(out))
    return out


@pytest.fixture(scope="module")
def page(report_file):
    with Browser() as b:
        url = b.open(report_file)
        b.settle(0.3)
        yield b, url, read_data(str(report_file))


def js(b, expr: str):
    return b.eval(f"JSON.stringify({expr})") and json.loads(b.eval(f"JSON.stringify({expr})"))


def choose(b, select_id: str, value) -> None:
    b.eval(f"(() => {{ const s = document.getElementById({json.dumps(select_id)}); s.value = {json.dumps(str(value))};"
           f" s.dispatchEvent(new Event('change')); }})()")


def test_opens_offline_without_errors(page):
    b, url, _ = page
    assert b.eval("document.body.dataset.ready") == "1"
    assert b.errors() == []
    assert set(b.requests()) == {url}  # the page itself, nothing else
    assert b.eval("typeof Plotly") == "object"


def test_every_plot_rendered(page):
    b, _, _ = page
    for pid in PLOTS:
        box = js(b, f"(() => {{ const p = document.getElementById('{pid}'); const s = p.querySelector('svg.main-svg');"
                    f" const r = s ? s.getBoundingClientRect() : {{width: 0, height: 0}};"
                    f" return [r.width, r.height, p.querySelectorAll('g.trace').length,"
                    f" p.querySelectorAll('g.trace path, g.trace .point').length]; }})()")
        assert box[0] > 100 and box[1] > 100, (pid, box)
        assert box[2] >= 1 and box[3] >= 1, (pid, box)


def test_numbers_shown_are_inspects(page):
    b, _, data = page
    s = data["splits"]["train"]["inspect"]["summary"]
    cards = dict(js(b, "[...document.querySelectorAll('#summary .card')].map(c => [c.querySelector('.k').textContent,"
                       " c.querySelector('.v').textContent])"))
    assert cards["samples"] == str(s["samples"]) and cards["rollouts"] == str(s["rollouts"])
    assert cards["prompt groups"] == str(s["prompt_groups"]) and cards["loss-mask sum"] == str(s["tokens"]["mask_sum"])
    rows = js(b, "document.querySelectorAll('#anomaly-table tbody tr').length")
    assert rows == len(data["splits"]["train"]["inspect"]["anomalies"]) == 7
    # the plotted reward means are the per-step table's
    ys = js(b, "document.getElementById('plot-reward').data.filter(t => t.name === 'reward mean')[0].y")
    assert ys == [p["reward_mean"] for p in s["per_step"]]


def test_drilldown_follows_the_chosen_rollout(page):
    b, _, _ = page
    before = b.eval("document.getElementById('drill-view').textContent")
    assert "rollout 1:0" in before
    choose(b, "drill-step", 2)
    choose(b, "drill-rollout", 16)
    after = b.eval("document.getElementById('drill-view').textContent")
    assert after != before and "rollout 2:16: 3 sample(s) in 1 rollout(s)" in after
    assert js(b, "document.querySelectorAll('#drill-table tbody tr').length") == 3
    # the second sample of rollout 16 has a tool span: a masked run drawn between trained ones
    strips = js(b, "[...document.querySelectorAll('#drill-view .mask')].map(m => [...m.children].map(s => s.className))")
    assert strips[1] == ["m1", "m0", "m1"]
    widths = js(b, "[...document.querySelectorAll('#drill-view .mask')[1].children].map(s => s.getBoundingClientRect().width)")
    assert all(w > 0 for w in widths)
    assert "tool_call" in after  # the response text
    assert b.eval("location.hash") == "#rollout-train-2-16"


def test_group_and_links(page):
    b, _, _ = page
    choose(b, "drill-step", 3)
    choose(b, "drill-group", 11)
    view = b.eval("document.getElementById('drill-view').textContent")
    assert "prompt group 11 of step 3: 3 sample(s) in 1 rollout(s)" in view
    b.eval("location.hash = '#rollout-train-2-19'")
    b.settle(0.2)
    assert "rollout 2:19: 2 sample(s)" in b.eval("document.getElementById('drill-view').textContent")
    b.eval("location.hash = '#anomaly-train-3'")
    b.settle(0.2)
    assert js(b, "document.getElementById('anomaly-train-3').classList.contains('hl')")
    # a group link in the anomalies table opens that prompt group
    b.eval("document.querySelector('#anomaly-table a[href=\"#group-train-1-1\"]').click()")
    b.settle(0.2)
    assert "prompt group 1 of step 1:" in b.eval("document.getElementById('drill-view').textContent")
    assert b.errors() == []


@pytest.mark.parametrize("fragment,shown", [
    ("rollout-train-2-16", "rollout 2:16: 3 sample(s) in 1 rollout(s)"),
    ("group-train-3-11", "prompt group 11 of step 3: 3 sample(s) in 1 rollout(s)"),
    ("rollout-eval-3-2", "rollout 3:2:"),
])
def test_permalink_opens_what_it_names(report_file, fragment, shown):
    """A page opened at a link shows what the link names, not the split's first rollout."""
    with Browser() as b:
        b.open(report_file, fragment)
        b.settle(0.3)
        assert b.eval("document.body.dataset.ready") == "1" and b.errors() == []
        assert shown in b.eval("document.getElementById('drill-view').textContent")
        assert b.eval("location.hash") == "#" + fragment
        split = fragment.split("-")[1]
        assert js(b, f"document.querySelector('#splits button[data-split={split}]').getAttribute('aria-selected')") == "true"


def test_anomaly_permalink_keeps_its_hash(report_file):
    with Browser() as b:
        b.open(report_file, "anomaly-train-3")
        b.settle(0.3)
        assert js(b, "document.getElementById('anomaly-train-3').classList.contains('hl')")
        assert b.eval("location.hash") == "#anomaly-train-3" and b.errors() == []


def test_eval_tab(page):
    b, _, data = page
    b.eval("document.querySelector('#splits button[data-split=eval]').click()")
    b.settle(0.2)
    cards = dict(js(b, "[...document.querySelectorAll('#summary .card')].map(c => [c.querySelector('.k').textContent,"
                       " c.querySelector('.v').textContent])"))
    assert cards["samples"] == str(data["splits"]["eval"]["inspect"]["summary"]["samples"]) == "7"
    assert "rollout 3:" in b.eval("document.getElementById('drill-view').textContent")
    assert b.errors() == []


@pytest.fixture(scope="module")
def trainer_page(tmp_path_factory):
    import train_dumps as T
    from rollout_cli.inspection import InspectOptions
    from rollout_cli.reporting import ReportOptions

    if find_browser() is None:
        pytest.fail("no Chromium on PATH: apt-get install chromium (the browser test is required, not optional)")
    base = tmp_path_factory.mktemp("trainer")
    rollout, train = T.write_run(base, edit=T.reward_fault)
    out = base / "report.html"
    build_report([str(rollout)], str(out), ReportOptions(InspectOptions(), train=[str(train)]))
    with Browser() as b:
        url = b.open(out)
        b.settle(0.3)
        yield b, url, read_data(str(out))


def test_no_trainer_section_without_train(page):
    b, _, _ = page
    assert js(b, "document.getElementById('trainer').hidden") is True


def test_trainer_section_shows_audits_numbers(trainer_page):
    b, url, data = trainer_page
    assert b.eval("document.body.dataset.ready") == "1" and b.errors() == [] and set(b.requests()) == {url}
    assert js(b, "document.getElementById('trainer').hidden") is False
    for pid in ("plot-mismatch", "dist-d"):
        box = js(b, f"(() => {{ const p = document.getElementById('{pid}'); const r = p.querySelector('svg.main-svg').getBoundingClientRect();"
                    f" return [r.width, r.height, p.querySelectorAll('g.trace path, g.trace .point').length]; }})()")
        assert box[0] > 100 and box[1] > 100 and box[2] >= 1, (pid, box)
    a = data["trainer"]["audit"]
    rows = js(b, "[...document.querySelectorAll('#trainer-table tbody tr')].map(r => [...r.children].map(c => c.textContent))")
    assert [r[0] for r in rows] == [str(s["step"]) for s in a["steps"]]
    assert [r[2] for r in rows] == [str(s["mismatch"]["tokens"]) for s in a["steps"]]
    assert [r[9] for r in rows] == [str(s["divergences"]) for s in a["steps"]]
    ys = js(b, "document.getElementById('plot-mismatch').data.filter(t => t.name === 'mean |d|')[0].y")
    assert ys == [s["mismatch"]["mean_abs_diff"] for s in a["steps"]]
    (div,) = js(b, "[...document.querySelectorAll('#divergence-table tbody tr')].map(r => [...r.children].map(c => c.textContent))")
    assert div[:3] == ["1", "4", "reward"] and div[4] == "9"


def test_trainer_drilldown_colours_tokens_by_d(trainer_page):
    b, _, data = trainer_page
    b.eval("document.querySelector('#divergence-table a[href=\"#rollout-train-1-4\"]').click()")
    b.settle(0.3)
    view = b.eval("document.getElementById('drill-view').textContent")
    assert "rollout 1:4: 1 divergence(s) from the trainer's data" in view
    assert "reward: expected" in view and "got 9" in view
    strip = js(b, "(() => { const c = document.querySelector('#drill-view canvas.dstrip'); const r = c.getBoundingClientRect();"
                  " return [c.dataset.tokens, c.dataset.counted, +c.dataset.maxAbsD, r.width, r.height]; })()")
    (tok,) = data["trainer"]["tokens"]["1:4"]
    assert strip[0] == "30" and strip[1] == str(sum(tok["mask"])) == "29"
    assert strip[2] == pytest.approx(max(abs(x) for x in tok["d"] if x is not None))
    assert strip[3] > 100 and strip[4] > 10
    # the masked first token is drawn grey, a counted one in colour
    px = js(b, "(() => { const g = document.querySelector('#drill-view canvas.dstrip').getContext('2d');"
               " return [[...g.getImageData(0, 0, 1, 1).data], [...g.getImageData(1, 0, 1, 1).data]]; })()")
    assert px[0][:3] == [208, 215, 222] and px[1][:3] != [208, 215, 222]
    assert b.errors() == []


@pytest.fixture(scope="module")
def rules_page(tmp_path_factory):
    """A compact slime run whose trainer ran #1965's id rule."""
    import train_dumps as T
    from rollout_cli.inspection import InspectOptions
    from rollout_cli.reporting import ReportOptions

    if find_browser() is None:
        pytest.fail("no Chromium on PATH: apt-get install chromium (the browser test is required, not optional)")
    base = tmp_path_factory.mktemp("rules")
    samples = T.compact(0)
    T.write_train(base / "train_data", samples, 0, n=2, rbs=3, id_rule="first_sample")
    T.write_rollout(base / "rollout_data", samples, 0, "jsonl")
    out = base / "report.html"
    build_report([str(base / "rollout_data")], str(out),
                 ReportOptions(InspectOptions(n_samples_per_prompt=2), train=[str(base / "train_data")]))
    with Browser() as b:
        url = b.open(out)
        b.settle(0.3)
        yield b, url, read_data(str(out))


def test_trainer_section_names_the_rules_with_audits_numbers(rules_page):
    b, _, data = rules_page
    assert b.errors() == []
    items = js(b, "[...document.querySelectorAll('#trainer-rules li')].map(li => li.textContent)")
    rules = data["trainer"]["audit"]["rules"]
    assert len(items) == len(rules) == 2
    reward, ids = rules
    assert items[0].startswith(f"step 0: reward: the trainer ran slime_positional ({reward['source']}; {reward['case']}), "
                               f"not group: {reward['samples']} sample(s) differ")
    assert f"max |delta| {reward['max_abs_delta']:.3g}" in items[0]
    assert f"{len(reward['cost']['advantage_sign_changes'])} advantage(s) change sign" in items[0]
    assert items[1].startswith(f"step 0: rollout_id: the trainer ran first_sample ({ids['source']}), not fill: "
                               f"{ids['samples']} sample(s) differ")
    top = ids["cost"]["loss_weight"][0]
    mode = max(top["share"], key=lambda m: abs(top["trainer_share"][m] - top["share"][m]))
    assert (f"rollout {top['rollout_id']} {top['share'][mode]:.3g} \u2192 {top['trainer_share'][mode]:.3g} ({mode})"
            in items[1])
