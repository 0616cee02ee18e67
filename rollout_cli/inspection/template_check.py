"""`inspect --check-template`: each dump sample whose prompt is a message list checked for
chat-template drift (text/drift.py), an anomaly `template_drift` per sample that drifts, and per
step the share of samples that drift and the supervised-token difference (`summary.template`)."""
from __future__ import annotations

from ..core.errors import UsageError
from ..inputs.units import in_steps, unit_step
from .aggregate import r6
from .anomalies import Anomalies, loc_dict
from .dumps import read_chunks
from .options import InspectOptions
from .sources import Sources


def _mask_total(mask, response_length: int) -> int:
    return int(response_length) if mask is None else int(sum(int(m) for m in mask))


def check_template(src: Sources, opts: InspectOptions, anomalies: Anomalies) -> dict:
    """`{"template": FILE, "tokenizer": FILE, "per_step": [...], samples counts}` for the dump units
    of `src`; every drifting sample is an anomaly."""
    if src.kind != "dumps":
        raise UsageError("--check-template reads dumps that hold the conversation (a prompt as a message list); "
                         "a converted output keeps no messages")
    from ..text.drift import Renderer, messages_of
    from ..text.template import load_template
    from ..text.tokenizer import load

    tok = load(opts.tokenizer)
    tpl = load_template(tok, opts.chat_template)
    renderer = Renderer(tpl, tok)
    per_step: list[dict] = []
    unchecked = 0
    for unit in src.units:
        if unit.step is not None and not in_steps(unit.step, opts.steps):
            continue
        payload: dict = {}
        st = {"checked": 0, "drifting": 0, "supervised_stored": 0, "supervised_rendered": 0}
        found: list = []
        for raw in read_chunks(unit.input, opts, payload):
            tokens, rls, prompts = raw.values("tokens"), raw.values("response_length"), raw.values("prompt")
            masks, mds, idx = raw.values("loss_mask"), raw.values("metadata"), raw.values("index")
            for i in range(len(raw)):
                prompt = messages_of(prompts[i])
                rl = rls[i]
                if prompt is None or tokens[i] is None or not isinstance(rl, int) or not 0 <= rl <= len(tokens[i]):
                    unchecked += 1
                    continue
                md = mds[i] if isinstance(mds[i], dict) else {}
                res = renderer.check(tokens[i], rl, prompt, messages_of(md.get("messages")), _mask_total(masks[i], rl))
                st["checked"] += 1
                st["supervised_stored"] += res.supervised_stored
                st["supervised_rendered"] += res.supervised_rendered
                if res.drift is not None:
                    st["drifting"] += 1
                    found.append((raw.location(i), idx[i], res.drift))
        step = unit_step(unit, payload.get("step"))
        if unit.step is None and not in_steps(step, opts.steps):
            continue
        for where, sample_index, d in found:
            turn = "the generation prompt" if d.turn is None else f"turn {d.turn} ({d.role})"
            anomalies.add("template_drift", "warning", unit.input.split, step,
                          f"the stored tokens are not the chat template re-rendered: first difference at position "
                          f"{d.position}, in {turn}: stored {d.stored!r}, rendered {d.rendered!r}",
                          [loc_dict(where)], sample_index=sample_index, field="tokens", position=d.position,
                          turn=d.turn, role=d.role, stored_token=d.stored, rendered_token=d.rendered)
        n = st["checked"]
        diff = st["supervised_stored"] - st["supervised_rendered"]
        per_step.append({"split": unit.input.split, "step": step, **st,
                         "drift_rate": r6(st["drifting"] / n) if n else None,
                         "supervised_difference": diff,
                         "supervised_difference_share": r6(diff / st["supervised_rendered"]) if st["supervised_rendered"] else None})
    checked = sum(p["checked"] for p in per_step)
    drifting = sum(p["drifting"] for p in per_step)
    return {"template": tpl.source, "tokenizer": tok.file, "checked": checked, "drifting": drifting,
            "drift_rate": r6(drifting / checked) if checked else None, "not_checked": unchecked, "per_step": per_step}
