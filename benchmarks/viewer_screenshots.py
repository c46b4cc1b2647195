"""Screenshots of ``verl view`` on a real dump, for the README (``docs/images/viewer_*.png``).

Runs the built-in multi-turn ``calculator`` preset for 4 steps with ``trainer.rollout_data_dir``
(about 10 s on CPU), writes the report page and photographs each view in the system Chromium
(Playwright with ``executable_path``, no browser download).

Usage: ``python benchmarks/viewer_screenshots.py [--out docs/images] [--work /tmp/verl_view_shots]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/images")
    ap.add_argument("--work", default="/tmp/verl_view_shots")
    args = ap.parse_args()
    work, out = Path(args.work), Path(args.out)
    shutil.rmtree(work, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.cli",
            "train",
            "calculator",
            "trainer.total_training_steps=4",
            "trainer.val_before_train=false",
            "data.val_files=[]",
            "trainer.progress_bar=false",
            "trainer.plot=false",
            "trainer.logger=[jsonl]",
            f"trainer.output_dir={work / 'out'}",
            f"trainer.default_local_dir={work / 'ckpt'}",
            f"trainer.rollout_data_dir={work / 'rollouts'}",
        ],
        check=True,
    )
    from verl.commands.viewer import write_report

    html = write_report(work / "rollouts", work / "report.html")
    print(f"report: {html} ({html.stat().st_size / 2**20:.2f} MiB)")
    rows = [json.loads(x) for x in (work / "rollouts" / "2.jsonl").read_text().splitlines()]
    offset = sum(1 for _ in (work / "rollouts" / "1.jsonl").open())
    called = offset + next(i for i, r in enumerate(rows) if r["tool_calls"] and r["score"] > 0)

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"))
        page = browser.new_page(viewport={"width": 1280, "height": 760})
        page.goto(html.as_uri())
        page.wait_for_selector("body[data-ready='1']")
        print("open ms", page.evaluate("window.__verl.readyMs"))
        page.select_option("#step", "2")
        page.screenshot(path=str(out / "viewer_overview.png"))
        page.click("button[data-view=groups]")
        page.click(f".sample[data-i='{called}']")
        page.wait_for_selector(f"#detail[data-row='{called}'] #tokens")
        page.screenshot(path=str(out / "viewer_groups.png"))
        page.click("button[data-view=list]")
        page.select_option("#color", "gap")
        page.wait_for_selector("#tokens[data-color='gap']")
        page.hover("#tokens .block.toolcall .tok >> nth=3")
        page.screenshot(path=str(out / "viewer_tokens.png"))
        page.select_option("#step", "all")
        page.select_option("#f-err", "1")
        first = page.get_attribute(".vlist .row", "data-i")
        if first is not None:
            page.click(f".vlist .row[data-i='{first}']")
            page.wait_for_selector(f"#detail[data-row='{first}'] #tokens")
        page.select_option("#color", "entropys")
        page.wait_for_selector("#tokens[data-color='entropys']")
        page.screenshot(path=str(out / "viewer_filter.png"))
        browser.close()
    for f in sorted(out.glob("viewer_*.png")):
        print(f, f"{f.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
