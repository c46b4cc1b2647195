"""The typed schema holds keys that act; verl's keys without effect are rows of the compat table.

Before the table moved out of the schema, ``RootConfig`` had 804 leaves of which 365 were verl
keys without effect (233 no-ops, 132 not supported); now every leaf takes effect, is conditional,
read indirectly or owned by an engine, except the few listed in ``EXCEPTIONS``.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import io
import re
from contextlib import redirect_stdout

import pytest

from verl.config import ConfigError, config_to_yaml, load_config
from verl.config.compat.verl_inert import verl_keys
from verl.config.compat.verl_keys import CONDITIONAL, HF_ENGINE, INDIRECT, NOOP, OWNED, UNSUPPORTED, key_status
from verl.config.introspect import _is_section, _strip_optional, all_keys, field_hints, key_kind, type_at
from verl.config.schema import RootConfig

EXCEPTIONS: dict[str, str] = {
    "reward_model.enable_resource_pool": "refused unless false, but read: streaming rewards check it with placement "
    "(verl/trainer/ppo/streaming_reward.py)",
    "reward_model.model.fsdp_config.reshard_after_forward": "a field of FSDPConfig, which acts for the actor, "
    "reference and critic",
    "reward_model.model.fsdp_config.mixed_precision": "a field of FSDPConfig, which acts for the actor, reference "
    "and critic",
    "reward_model.model.fsdp_config.tensor_parallel_size": "a field of FSDPConfig, which acts for the actor and critic",
}
"""Schema leaves whose table status is still noop / unsupported, with why they stay fields."""


def _leaves() -> list[str]:
    return [k for k in all_keys() if not _is_section(type_at(k))]


def _status(path: str) -> str:
    return (key_status(path) or ("effect",))[0]


def test_schema_leaves_take_effect():
    counts = collections.Counter(_status(k) for k in _leaves())
    inert = sorted(k for k in _leaves() if _status(k) in ("noop", "unsupported"))
    print(
        f"RootConfig leaves {sum(counts.values())}: {dict(counts)}; "
        f"verl keys without effect (table rows) {len(verl_keys())}"
    )
    assert inert == sorted(EXCEPTIONS)
    assert counts["effect"] + counts["conditional"] + counts["indirect"] + counts["owned"] == sum(
        counts.values()
    ) - len(EXCEPTIONS)


def test_inert_keys_are_table_rows_not_fields():
    fields = set(all_keys())
    table = verl_keys()
    assert len(table) > 300
    for key, (_, status, note) in table.items():
        assert key not in fields and key_kind(key) == "verl", key
        assert status in ("noop", "unsupported") and note, key
    counts = collections.Counter(status for _, status, _ in table.values())
    assert counts["noop"] > 200 and counts["unsupported"] > 100


def test_table_notes_are_current():
    notes = [
        *NOOP.values(),
        *UNSUPPORTED.values(),
        *OWNED.values(),
        *CONDITIONAL.values(),
        *INDIRECT.values(),
        *(note for _, note in HF_ENGINE.values()),
    ]
    stale = [n for n in notes if re.search(r"being built|\bissue\b|\(issue", n)]
    assert stale == []


def _field_comments(cls: type) -> dict[str, str]:
    """Field name -> the comment lines right under its line in the class source."""
    lines = inspect.getsource(cls).split("\n")
    out = {}
    for i, line in enumerate(lines):
        m = re.match(r"^    (\w+): ", line)
        if m and m.group(1) in cls.__dataclass_fields__:
            j, text = i + 1, []
            while j < len(lines) and lines[j].startswith("    # "):
                text.append(lines[j].strip()[2:])
                j += 1
            out[m.group(1)] = " ".join(text)
    return out


def _documented(cls: type) -> dict[str, tuple[str, str]]:
    """Field -> (owning class, its comment), inherited fields included."""
    out = {}
    for base in reversed(cls.__mro__):
        if dataclasses.is_dataclass(base):
            out.update({name: (base.__name__, text) for name, text in _field_comments(base).items()})
    return out


def test_every_leaf_is_documented_once():
    undocumented, by_text = [], collections.defaultdict(set)

    def walk(cls: type, prefix: str) -> None:
        docs = _documented(cls)
        for name, tp in field_hints(cls).items():
            path = f"{prefix}.{name}" if prefix else name
            if _is_section(tp):
                walk(_strip_optional(tp), path)
                continue
            owner, text = docs.get(name, ("", ""))
            if text:
                by_text[text].add(f"{owner}.{name}")
            else:
                undocumented.append(path)

    walk(RootConfig, "")
    assert undocumented == []
    assert {t: sorted(f) for t, f in by_text.items() if len(f) > 1} == {}


def test_config_show_verl_keys_round_trips(tmp_path):
    from verl.config.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["show", "--verl-keys", "quickstart"]) == 0
    text = out.getvalue()
    assert "forward_prefetch: false" in text and "timeline_json_file: null" in text
    path = tmp_path / "shown.yaml"
    path.write_text(text)
    base = load_config("quickstart")
    again = load_config(str(path), [f"trainer.experiment_name={base.trainer.experiment_name}"])
    assert config_to_yaml(again) == config_to_yaml(base)
    assert "forward_prefetch" not in config_to_yaml(base)


def test_generate_and_eval_layouts_apply_the_table(tmp_path):
    from verl.config.offline import load_eval_config, load_generation_config

    out = str(tmp_path / "gen.jsonl")
    base = ["data.path=builtin://arithmetic/test", f"data.output_path={out}"]
    cfg = load_generation_config(None, [*base, "model.use_shm=false", "rollout.trace.backend=null"])
    assert not hasattr(cfg.rl.actor_rollout_ref.model, "use_shm")
    with pytest.raises(ConfigError, match=r"^model.use_shm=True has no effect in verl generate: remove it$"):
        load_generation_config(None, [*base, "model.use_shm=true"])
    assert load_eval_config(None, ["data.path=x.jsonl", "ray_kwargs.timeline_json_file=null"]).data.path == "x.jsonl"
    with pytest.raises(ConfigError, match=r"^ray_kwargs.timeline_json_file is not supported yet: verl eval scores"):
        load_eval_config(None, ["data.path=x.jsonl", "ray_kwargs.timeline_json_file=t.json"])
