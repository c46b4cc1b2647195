"""``verl view``: the payload (hand-checked) and the page, clicked through in headless Chromium.

The browser tests use the system Chromium (Debian ``chromium``) through Playwright with
``executable_path`` (no browser download) and skip with the reason where it is missing.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from tests.commands.viewer_helpers import chromium_or_skip, write_large_dump, write_step
from verl.config import load_config
from verl.commands.viewer import _json_for_script, build_html, main
from verl.commands.viewer.data import load_dump, pack
from verl.utils.errors import DataError

PIECES = {
    0: "<s>",
    1: "Q:",
    2: "<tool_call>",
    3: "calc",
    4: "</tool_call>",
    5: "<tool_response>",
    6: "42",
    7: "</tool_response>",
    8: " the",
    9: " answer",
    10: " is",
    11: " #### 42",
    12: "<script>",
    13: "alert(1)",
    14: "</script>",
    15: "</s>",
    16: "<img src=x onerror=alert(2)>",
}
EVIL_SOURCE = "</script><script>alert(3)</script>"
MAX_LEN = 12


def _small_dump(root: Path) -> Path:
    """Step 1: group 1-0 (tool call, tool error, truncated, <script> text), group 1-1; step 2: 8 rows."""
    step1 = [
        {
            "output": "<tool_call>calc</tool_call><tool_response>42</tool_response> the answer is #### 42",
            "score": 1.0,
            "uid": "1-0",
            "data_source": "openai/gsm8k",
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}, "status": "ok"}],
            "acc": True,
        },
        {
            "output": " the answer is42</s>",
            "score": 0.0,
            "uid": "1-0",
            "data_source": "openai/gsm8k",
            "tool_calls": [{"name": "calculator", "arguments": {}, "status": "error"}],
            "acc": False,
        },
        {"output": " the" * MAX_LEN, "score": 0.0, "uid": "1-0", "data_source": "openai/gsm8k", "acc": False},
        {
            "output": "<script>alert(1)</script><img src=x onerror=alert(2)></s>",
            "score": 0.0,
            "uid": "1-0",
            "data_source": EVIL_SOURCE,
            "acc": False,
        },
    ] + [
        {
            "output": " the answer is #### 42</s>",
            "score": float(k % 2),
            "uid": "1-1",
            "data_source": "math",
            "acc": bool(k % 2),
        }
        for k in range(4)
    ]
    resp1 = [[2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 15], [8, 9, 10, 6, 15], [8] * MAX_LEN, [12, 13, 14, 16, 15]] + [
        [8, 9, 10, 11, 15]
    ] * 4
    mask1 = [[1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1]] + [[1] * len(r) for r in resp1[1:]]
    write_step(root, 1, step1, resp1, mask1, PIECES, MAX_LEN)
    step2 = [
        {"output": " the answer is #### 42</s>", "score": 1.0, "uid": f"2-{k // 4}", "data_source": "math", "acc": True}
        for k in range(8)
    ]
    write_step(root, 2, step2, [[8, 9, 10, 11, 15]] * 8, [[1] * 5] * 8, PIECES, MAX_LEN)
    return root


# ----------------------------------------------------------------------------------- payload
def test_json_for_script_cannot_close_the_element():
    text = _json_for_script({"a": "</script><!-- & \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><!-- & \u2028"}


def _decode(chunk: str, meta: dict) -> dict:
    """Python twin of the page's row decoder (page.js rowData)."""
    u = zlib.decompress(base64.b64decode(chunk))
    jl, p, r, flags = np.frombuffer(u[:16], "<u4")
    off, w = 16, meta["idBytes"]
    ids = np.frombuffer(u[off : off + (p + r) * w], np.uint8).reshape(w, p + r).T.copy().view(f"<u{w}").ravel()
    off += (p + r) * w
    mask = np.frombuffer(u[off : off + r], np.uint8)
    off += r
    q = {}
    for name, bit in (("old_log_probs", 1), ("gap", 2), ("entropys", 4), ("advantages", 8)):
        if flags & bit:
            q[name] = (
                np.frombuffer(u[off : off + 2 * r], np.uint8)
                .reshape(2, r)
                .T.copy()
                .view("<f2")
                .ravel()
                .astype(np.float32)
            )
            off += 2 * r
    return {"ids": ids, "P": p, "R": r, "mask": mask, "q": q, "row": json.loads(u[off : off + jl])}


def test_pack_round_trips_tokens_and_quantities(tmp_path):
    steps = load_dump(_small_dump(tmp_path / "d"))
    meta, chunks, text = pack(steps)
    assert (
        meta["n"] == 16
        and meta["steps"] == [1, 2]
        and meta["quantities"] == ["old_log_probs", "gap", "entropys", "advantages"]
    )
    d = _decode(chunks[0], meta)
    t = steps[0].tokens
    assert (d["P"], d["R"]) == (2, 11)
    assert [meta["vocab"][i] for i in d["ids"][2:5]] == ["<tool_call>", "calc", "</tool_call>"]
    assert d["mask"].tolist() == [1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1]
    gap = t["rollout_log_probs"][:11] - t["old_log_probs"][:11]
    np.testing.assert_allclose(
        d["q"]["gap"], gap, rtol=1e-3, atol=1e-7
    )  # float16 of the gap itself, not of a difference
    np.testing.assert_allclose(d["q"]["old_log_probs"], t["old_log_probs"][:11], rtol=1e-3, atol=1e-6)
    assert "input" not in d["row"] and d["row"]["tool_calls"][0]["name"] == "calculator"
    c = meta["cols"]
    # hand-computed summaries: max / mean |gap| over trained tokens (mask 1) of row 0; truncated row 2; tool error row 1
    m = np.array([1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1], bool)
    assert c["mis"][0] == pytest.approx(np.abs(gap[m]).max(), rel=1e-3)
    assert c["misMean"][0] == pytest.approx(np.abs(gap[m]).mean(), rel=1e-3)
    assert c["trunc"][:4] == [0, 0, 1, 0] and c["toolErr"][:4] == [0, 1, 0, 0] and c["calls"][:2] == [1, 1]
    assert c["len"][:4] == [11, 5, 12, 5] and c["pad"][:4] == [1, 7, 0, 7]
    assert meta["overview"]["accuracy"] == [pytest.approx(3 / 8), 1.0] and meta["overview"]["accuracyFrom"] == "acc"
    assert meta["overview"]["reward"] == [pytest.approx(3 / 8), 1.0]
    texts = json.loads(zlib.decompress(base64.b64decode(text)))
    assert texts[3] == ["Q: what is 6*7?", "<script>alert(1)</script><img src=x onerror=alert(2)></s>"]


def test_load_dump_errors_name_the_file(tmp_path):
    with pytest.raises(DataError, match="no <step>.jsonl"):
        load_dump(tmp_path)
    (tmp_path / "3.jsonl").write_text('{"score": 1}\nnot json\n')
    with pytest.raises(DataError, match=r"3\.jsonl:2: not a JSON object"):
        load_dump(tmp_path)
    d = _small_dump(tmp_path / "d")
    (d / "2.jsonl").write_text((d / "2.jsonl").read_text().split("\n", 1)[1])
    with pytest.raises(DataError, match=r"2\.tokens\.npz: 8 rows but 2\.jsonl has 7"):
        load_dump(d)


def test_text_only_dump_still_renders(tmp_path):
    (tmp_path / "1.jsonl").write_text(json.dumps({"input": "q", "output": "a", "score": 1.0, "step": 1}) + "\n")
    meta, chunks, _ = pack(load_dump(tmp_path))
    assert meta["hasTokens"] is False and meta["quantities"] == [] and meta["cols"]["len"] == [1]


def test_cli_writes_a_self_contained_page(tmp_path, capsys):
    d = _small_dump(tmp_path / "d")
    assert main([str(d), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "wrote" in capsys.readouterr().out
    rest = page.replace("'http://www.w3.org/2000/svg'", "")  # the SVG namespace name, not a fetch
    assert "http://" not in rest and "https://" not in rest
    assert "<img" not in page and "\\u003cimg src=x" in page  # model text only as escaped JSON
    assert page.count("<script") == 4 and "script-src 'sha256-" in page
    assert "<script>alert" not in page and EVIL_SOURCE not in page


# ----------------------------------------------------------------------------------- browser
@pytest.fixture(scope="module")
def browser():
    path = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path)
        yield b
        b.close()


def _open(browser, html: Path):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.dialogs = []
    page.errors = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(html.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=15000)
    return page


@pytest.fixture(scope="module")
def small_page(browser, tmp_path_factory):
    root = tmp_path_factory.mktemp("view")
    html = root / "r.html"
    html.write_text(build_html(_small_dump(root / "d")))
    page = _open(browser, html)
    yield page
    page.close()


def _count(page) -> str:
    return page.text_content("#count")


def _show(page, i: int, where: str = ".vlist .row") -> None:
    """Click row ``i`` and wait until the detail pane shows it."""
    page.click(f"{where}[data-i='{i}']")
    page.wait_for_selector(f"#detail[data-row='{i}'] #tokens")


def _expect_count(page, pattern: str) -> None:
    from playwright.sync_api import expect  # polls without eval (the page's CSP forbids it)

    expect(page.locator("#count")).to_have_text(re.compile(pattern))


def test_step_picker_and_overview(small_page):
    page = small_page
    assert page.locator(".plot").count() == 5 and page.locator(".plot svg polyline").count() == 5
    assert page.locator("table.steps tr").count() == 3
    assert _count(page) == "16 of 16 trajectories, 4 groups"
    page.select_option("#step", "2")
    assert _count(page) == "8 of 16 trajectories, 2 groups"
    assert page.text_content("table.steps tr.cur td").strip() == "2"
    page.click("#prev")
    assert page.input_value("#step") == "1" and _count(page) == "8 of 16 trajectories, 2 groups"
    page.click("circle[data-step='2']")  # a point of an overview plot picks its step
    assert page.input_value("#step") == "2"
    page.select_option("#step", "all")


def test_groups_view_and_token_colouring(small_page):
    page = small_page
    page.select_option("#step", "1")
    page.click("button[data-view=groups]")
    cards = page.locator(".gcard")
    assert cards.count() == 2
    assert "group 1-0" in cards.nth(0).text_content() and cards.nth(0).locator(".sample").count() == 4
    first = cards.nth(0).locator(".sample").nth(0).text_content()
    assert "reward 1" in first and "adv +0.5" in first
    assert cards.nth(0).locator(".sample.pos").count() == 1 and cards.nth(0).locator(".sample.neg").count() == 3
    _show(page, 0, ".sample")
    call = page.locator("#tokens .block.toolcall")
    assert (
        call.count() == 1
        and "calculator · ok" in call.text_content()
        and "<tool_call>calc</tool_call>" in call.text_content()
    )
    tool = page.locator("#tokens .block.masked")
    assert (
        tool.get_attribute("data-kind") == "tool response"
        and "<tool_response>42</tool_response>" in tool.text_content()
    )
    assert page.text_content("#padding") == "padding × 1 (not trained)"
    trained, masked = "#tokens > .tok[data-k='6']", "#tokens .block.masked .tok"
    adv_bg = page.eval_on_selector(trained, "e => getComputedStyle(e).backgroundColor")
    assert adv_bg.startswith("rgba(22, 163, 74")  # green: advantage +0.5 > 0
    assert page.eval_on_selector(masked, "e => e.style.background") == ""  # masked tokens are never coloured
    page.select_option("#color", "entropys")
    page.wait_for_selector("#tokens[data-color='entropys']")
    ent_bg = page.eval_on_selector(trained, "e => getComputedStyle(e).backgroundColor")
    assert ent_bg.startswith("rgba(217, 119, 6") and ent_bg != adv_bg
    page.hover(trained)
    assert page.text_content("#hover").startswith('token 6  id 8  " the"  trained  logp(train) -')
    page.select_option("#color", "advantages")


def test_filters_and_search(small_page):
    page = small_page
    page.select_option("#step", "all")
    page.click("button[data-view=list]")
    page.fill("#f-rmin", "1")
    assert _count(page) == "11 of 16 trajectories, 4 groups"
    page.fill("#f-rmin", "")
    page.select_option("#f-trunc", "1")
    assert _count(page) == "1 of 16 trajectories, 1 groups"
    assert page.locator(".vlist .row").count() == 1 and page.get_attribute(".vlist .row", "data-i") == "2"
    page.select_option("#f-trunc", "")
    page.select_option("#f-err", "1")
    assert page.get_attribute(".vlist .row", "data-i") == "1" and _count(page).startswith("1 of")
    page.select_option("#f-err", "")
    page.select_option("#f-src", label="math")
    assert _count(page) == "12 of 16 trajectories, 3 groups"
    page.select_option("#f-src", "")
    page.fill("#f-lmin", "11")
    assert _count(page) == "2 of 16 trajectories, 1 groups"
    page.fill("#f-lmin", "")
    page.fill("#f-mis", "1")  # gaps are ~0.01 here
    assert _count(page).startswith("0 of")
    page.fill("#f-mis", "")
    page.fill("#f-q", "ALERT(1)")
    _expect_count(page, "^1 of")
    assert page.get_attribute(".vlist .row", "data-i") == "3"
    page.fill("#f-q", "")
    _expect_count(page, "^16 of")


def test_script_in_model_text_renders_as_text(small_page):
    page = small_page
    page.click("button[data-view=list]")
    _show(page, 3)
    assert "<script>alert(1)</script><img src=x onerror=alert(2)>" in page.text_content("#tokens")
    assert "<script>alert(1)</script>" in page.text_content(".vlist .row[data-i='3'] .snip")
    assert EVIL_SOURCE in page.text_content("#rowinfo")
    page.click("button[data-view=groups]")
    assert EVIL_SOURCE in page.text_content(".gcard")
    assert page.evaluate("document.scripts.length") == 4 and page.locator("img").count() == 0
    assert page.dialogs == [] and page.errors == []


def test_export_row_as_reward_fixture(small_page):
    from verl.reward.scorers import default_compute_score

    page = small_page
    page.click("button[data-view=list]")
    _show(page, 0)
    page.click("#export")
    fx = json.loads(page.text_content("#fixture"))
    assert fx["solution_str"].endswith("#### 42") and fx["ground_truth"] == "42" and fx["data_source"] == "openai/gsm8k"
    assert fx["row"]["input"] == "Q: what is 6*7?" and fx["row"]["tool_calls"][0]["status"] == "ok"
    out = default_compute_score(fx["data_source"], fx["solution_str"], fx["ground_truth"], fx["extra_info"])
    assert (out["score"] if isinstance(out, dict) else out) == fx["expected_score"] == 1.0


def test_thousand_trajectories_is_a_few_megabytes(browser, tmp_path):
    write_large_dump(tmp_path / "d", n_rows=1000, n_tokens=300)
    html = tmp_path / "r.html"
    html.write_text(build_html(tmp_path / "d"))
    # random ids and log-probs barely compress (a real dump does better): 4.7 MiB measured
    assert html.stat().st_size < 6 * 2**20
    page = _open(browser, html)
    assert page.text_content("#count") == "1000 of 1000 trajectories, 125 groups"
    page.click("button[data-view=list]")
    assert page.locator(".vlist .row").count() < 60  # only the rows on screen exist
    page.close()


def test_serve_fetches_rows_lazily(browser, tmp_path):
    import threading

    from verl.commands.viewer import make_server

    server = make_server(_small_dump(tmp_path / "d"), 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
        page.wait_for_selector("body[data-ready='1']")
        assert page.evaluate("document.getElementById('verl-rows').textContent") == ""  # nothing embedded
        page.click("button[data-view=list]")
        _show(page, 0)
        assert "calculator · ok" in page.text_content("#tokens .block.toolcall")
        page.fill("#f-q", "alert(1)")
        _expect_count(page, "^1 of")
        page.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.e2e
def test_calculator_run_dump_opens_in_the_viewer(browser, tmp_path):
    """A real dump: one step of the calculator preset, then its tool calls and masked tool turns on screen."""
    from verl.trainer import RLTrainer

    cfg = load_config(
        "calculator",
        [
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=4",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "data.val_files=[]",
            "trainer.logger=[jsonl]",
            "trainer.progress_bar=false",
            "trainer.plot=false",
            f"trainer.output_dir={tmp_path / 'out'}",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
            f"trainer.rollout_data_dir={tmp_path / 'dump'}",
        ],
    )
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:  # the agent loop runs its own asyncio loop; Playwright's owns this thread
        pool.submit(lambda: RLTrainer(config=cfg).fit()).result()
    z = np.load(tmp_path / "dump" / "1.tokens.npz")
    assert {"old_log_probs", "rollout_log_probs", "entropys", "advantages"} <= set(
        z.files
    )  # the dump forces the old-log-prob pass
    html = tmp_path / "r.html"
    html.write_text(build_html(tmp_path / "dump"))
    page = _open(browser, html)
    rows = [json.loads(x) for x in (tmp_path / "dump" / "1.jsonl").read_text().splitlines()]
    called = next(i for i, r in enumerate(rows) if r["tool_calls"])
    page.click("button[data-view=list]")
    _show(page, called)
    assert "calculator" in page.text_content("#tokens .block.toolcall")
    assert page.get_attribute("#tokens .block.masked", "data-kind") == "tool response"
    assert page.errors == []
    page.close()


@pytest.mark.slow
def test_ten_thousand_trajectories_of_2000_tokens_open_and_filter_under_3s(browser, tmp_path):
    """Served (``verl view --serve``): open + a filter, measured in the browser with performance.now()
    (measured on the shared 2-core machine: open 149-368 ms, reward filter 3-5 ms)."""
    import threading

    from verl.commands.viewer import make_server

    write_large_dump(tmp_path / "d", n_rows=10_000, n_tokens=2_000)
    server = make_server(tmp_path / "d", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
        page.wait_for_selector("body[data-ready='1']", timeout=30000)
        open_ms = page.evaluate("window.__verl.readyMs")  # since navigation start
        page.click("button[data-view=list]")
        page.fill("#f-rmin", "1")
        filter_ms = page.evaluate("window.__verl.lastFilterMs")
        assert _count(page).startswith(
            str(sum(1 for line in (tmp_path / "d" / "1.jsonl").open() if '"score": 1.0' in line))
        )
        assert open_ms + filter_ms < 3000, (open_ms, filter_ms)
        _show(page, int(page.get_attribute(".vlist .row", "data-i")))
        assert page.locator("#tokens .tok").count() == 2_000 + 2
        page.close()
    finally:
        server.shutdown()
        server.server_close()


def test_verl_view_on_a_wrong_directory_is_one_line(tmp_path, capsys):
    from verl.cli import main as verl

    assert verl(["view", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"verl view: data error: {tmp_path / 'nope'}: not a directory (expected a trainer.rollout_data_dir)"
