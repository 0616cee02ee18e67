"""rollout_cli.text.drift: the first differing position (property), message lists, and the
check of one sample against a rendered conversation."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from conftest import sample_generator
from rollout_cli.text.drift import END, Renderer, first_difference, messages_of

ids = st.lists(st.integers(0, 5), max_size=12)


@given(a=ids, b=ids)
def test_first_difference_is_where_they_part(a, b):
    p = first_difference(a, b)
    if a == b:
        assert p is None
    else:
        assert a[:p] == b[:p] and (p == min(len(a), len(b)) or a[p] != b[p])
    q = first_difference(a, b, whole=False)  # the common length only
    n = min(len(a), len(b))
    assert (q is None) == (a[:n] == b[:n]) and (q is None or q == p)


def test_messages_of():
    msgs = [{"role": "user", "content": "hi"}]
    assert messages_of(msgs) == msgs and messages_of('[{"role": "user", "content": "hi"}]') == msgs
    assert messages_of("plain text") is None and messages_of([]) is None and messages_of([{"content": "x"}]) is None


@pytest.fixture(scope="module")
def renderer(tmp_path_factory):
    pytest.importorskip("tokenizers")
    pytest.importorskip("jinja2")
    from rollout_cli.text.template import load_template
    from rollout_cli.text.tokenizer import load

    gen = sample_generator("make_text_dumps")
    tok = load(str(gen.build_tokenizer(tmp_path_factory.mktemp("tok"))))
    return Renderer(load_template(tok, None), tok), gen


def test_a_conversation_rendered_back_does_not_drift_and_a_changed_token_does(renderer):
    r, gen = renderer
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 plus 3?"},
            {"role": "assistant", "content": "Answer: 5"}, {"role": "user", "content": "And 4 plus 4?"},
            {"role": "assistant", "content": "Answer: 8"}]
    tokens = r.ids(conv, False)
    prompt_len = len(r.ids(conv[:2], True))
    rl = len(tokens) - prompt_len
    ok = r.check(tokens, rl, conv[:2], conv, 0)
    assert ok.drift is None and ok.supervised_rendered > 0
    assert r.check(tokens[:-1], rl - 1, conv[:2], conv, 0).drift is None  # the tail after the last token: not sampled
    for at in (0, prompt_len - 1, prompt_len + 2, len(tokens) - 3):
        bad = list(tokens)
        bad[at] = (bad[at] + 1) % 300 + 5
        d = r.check(bad, rl, conv[:2], conv, 0).drift
        assert d is not None and d.position == at and d.stored_id == bad[at] and d.rendered_id == tokens[at]
    d = r.check(tokens[:prompt_len - 2], 0, conv[:2], None, 0).drift  # the stored prompt ends early
    assert d.position == prompt_len - 2 and d.stored == END and d.role == "generation prompt"
