"""``verl view DIR [--out report.html] [--serve PORT]``: a token-level trajectory inspector.

``DIR`` is a ``trainer.rollout_data_dir``: each step's ``<step>.jsonl`` and, when written by
this version, ``<step>.tokens.npz`` (`verl.trainer.ppo.dumps`); a ``trainer.validation_data_dir``
(same rows, no token file) shows without the token view. The output is one
self-contained HTML file (script and style inlined, no network access: its Content Security
Policy allows only its own script, by hash) with

- a step picker and a run overview (mean reward, response length, accuracy, tool calls and
  truncated share over steps, as inline SVG plots);
- the trajectory list and the groups view (the ``n`` samples of a prompt side by side with
  their rewards and advantages), both rendered lazily (only the rows on screen exist);
- the token view of a selected trajectory: each trained token coloured by advantage, log-prob
  gap rollout - training, entropy or training log-prob; prompt, tool and user turns
  (``response_mask = 0``) and padding as hatched blocks; tool calls as framed blocks;
- filters (reward, length, gap, data source, truncated, tool errors), search, sorting, and
  export of a row as a JSON fixture (verl's ``compute_score`` arguments ``data_source``,
  ``solution_str``, ``ground_truth``, ``extra_info``, with ``expected_score`` and the row).

Model text reaches the page only as JSON data (``<``, ``>``, ``&`` escaped) or base64, and is
written with text nodes, never parsed as HTML.

``--serve PORT`` serves the page on ``127.0.0.1:PORT`` only, with the row summaries inline and
each trajectory's tokens (``/rows/<i>``) and the texts for search (``/text``) fetched when
first needed: the browser then reads a few MB at open instead of the whole dump. That is the
mode for large dumps: a file holding 10,000 trajectories of 2,000 tokens is about 250 MB,
which Chromium needs several seconds to read. In the file the row data follows the script, so
the overview, lists and filters work while the browser is still reading it; the token view
and search wait for it.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.server
import json
from importlib import resources
from pathlib import Path
from typing import Sequence

from verl.commands.viewer.data import load_dump, pack

__all__ = ["build_html", "main", "make_server", "write_report"]

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'sha256-{hash}'; style-src \
'unsafe-inline'; img-src data:{connect}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>verl view</title><style>{css}</style></head>
<body>
<header><h1 id="title">verl view</h1>
<span class="tabs"><button data-view="overview">Overview</button><button data-view="list">Trajectories</button>\
<button data-view="groups">Groups</button></span>
<label>step <select id="step"></select></label><button id="prev" title="previous step">&lsaquo;</button>\
<button id="next" title="next step">&rsaquo;</button>
<label>colour by <select id="color"></select></label></header>
<div id="filters">
<label>reward <input id="f-rmin" type="number" step="any" placeholder="min"> - <input id="f-rmax" type="number" \
step="any" placeholder="max"></label>
<label>length <input id="f-lmin" type="number" placeholder="min"> - <input id="f-lmax" type="number" placeholder="max">\
</label>
<label>|gap| &ge; <input id="f-mis" type="number" step="any" placeholder="e.g. 0.1"></label>
<label>data source <select id="f-src"><option value="">any</option></select></label>
<label>truncated <select id="f-trunc"><option value="">any</option><option value="1">yes</option>\
<option value="0">no</option></select></label>
<label>tool errors <select id="f-err"><option value="">any</option><option value="1">yes</option>\
<option value="0">no</option></select></label>
<label>search <input id="f-q" type="search" placeholder="text in prompt or response"></label>
<label>sort <select id="f-sort"><option value="">dump order</option><option value="reward-">reward &darr;</option>\
<option value="reward+">reward &uarr;</option>
<option value="length-">length &darr;</option><option value="mismatch-">|gap| &darr;</option>\
<option value="advantage-">advantage &darr;</option><option value="advantage+">advantage &uarr;</option></select>\
</label>
<span id="count"></span></div>
<main><div id="pane"></div>\
<div id="detail" class="empty">Select a trajectory (Trajectories or Groups view) to see its tokens.</div></main>
<script type="application/json" id="verl-meta">{meta}</script>
<script>{js}</script>
<script type="text/plain" id="verl-rows">{rows}</script>
<script type="text/plain" id="verl-text">{text}</script>
</body></html>
"""


def _asset(name: str) -> str:
    return resources.files("verl.commands.viewer").joinpath(name).read_text(encoding="utf-8")


def _json_for_script(obj: object) -> str:
    """JSON that cannot end its ``<script>`` element or open a comment: ``<``, ``>``, ``&`` as escapes."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _page(meta: dict, chunks: list[str], text: str, remote: bool) -> str:
    js = _asset("page.js")
    digest = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode("ascii")
    meta = {**meta, "remote": remote}
    return _PAGE.format(
        hash=digest,
        connect="; connect-src 'self'" if remote else "",
        css=_asset("page.css"),
        meta=_json_for_script(meta),
        rows="" if remote else ",".join(chunks),
        text="" if remote else text,
        js=js,
    )


def build_html(directory: str | Path) -> str:
    """The self-contained report page of a dump directory (module docstring).

    Raises:
        DataError: the directory is not a readable ``trainer.rollout_data_dir`` (`load_dump`).
    """
    root = Path(directory)
    meta, chunks, text = pack(load_dump(root), title=root.resolve().name)
    return _page(meta, chunks, text, remote=False)


def write_report(directory: str | Path, out: str | Path) -> Path:
    """Write `build_html` of ``directory`` to ``out``; returns ``out``."""
    page = build_html(directory)  # first: a wrong directory must not be created by the write
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def make_server(directory: str | Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """An HTTP server on ``127.0.0.1:port`` (0 = any free port) for the dump (module docstring).

    Routes: ``/`` the page, ``/rows/<i>`` row ``i``'s chunk, ``/text`` the texts; the caller
    runs ``serve_forever()``.

    Raises:
        DataError: the directory is not a readable ``trainer.rollout_data_dir`` (`load_dump`).
    """
    root = Path(directory)
    meta, chunks, text = pack(load_dump(root), title=root.resolve().name)
    page = _page(meta, chunks, text, remote=True).encode("utf-8")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                self._send(page, "text/html; charset=utf-8")
            elif path == "/text":
                self._send(text.encode("ascii"), "text/plain")
            elif path.startswith("/rows/") and path[6:].isdigit() and int(path[6:]) < len(chunks):
                self._send(chunks[int(path[6:])].encode("ascii"), "text/plain")
            else:
                self.send_error(404)

        def _send(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)


def main(argv: Sequence[str] | None = None) -> int:
    """``verl view DIR [--out report.html] [--serve PORT]``; returns the exit status."""
    ap = argparse.ArgumentParser(
        prog="verl view", description="Token-level trajectory inspector of a trainer.rollout_data_dir."
    )
    ap.add_argument("dir", help="the trainer.rollout_data_dir (<step>.jsonl and <step>.tokens.npz files)")
    ap.add_argument("--out", default=None, help="HTML file to write (default: DIR/report.html unless --serve)")
    ap.add_argument(
        "--serve", type=int, default=None, metavar="PORT", help="serve the page on 127.0.0.1:PORT (0 = any free port)"
    )
    args = ap.parse_args(list(argv) if argv is not None else None)
    if args.serve is not None and not 0 <= args.serve <= 65535:
        ap.error(f"--serve: port must be 0..65535, got {args.serve}")
    if args.out is not None or args.serve is None:
        out = write_report(args.dir, args.out if args.out is not None else Path(args.dir) / "report.html")
        print(f"verl view: wrote {out} ({out.stat().st_size / 2**20:.2f} MiB)")
    if args.serve is not None:
        with make_server(args.dir, args.serve) as server:
            print(f"verl view: serving on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
            try:
                server.serve_forever()
            except KeyboardInterrupt:
                pass
    return 0
