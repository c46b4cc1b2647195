// verl view: the page's script. Reads the embedded payload (see verl/commands/viewer/data.py),
// renders only what is on screen, and writes model text with textContent / text nodes only.
(function () {
  'use strict';
  const t0 = performance.now();
  const META = JSON.parse(document.getElementById('verl-meta').textContent);
  // the embedded rows follow this script in the file: usable once the parser has read them
  const PARSED = new Promise((done) => {
    if (document.readyState !== 'loading') done();
    else document.addEventListener('DOMContentLoaded', () => { window.__verl.dataMs = performance.now(); done(); });
  });
  let CHUNKS = null, TEXT_B64 = null;
  async function embedded() {
    await PARSED;
    if (!CHUNKS) { CHUNKS = document.getElementById('verl-rows').textContent.split(','); TEXT_B64 = document.getElementById('verl-text').textContent; }
  }
  const C = META.cols, N = META.n;
  const QBIT = { old_log_probs: 1, gap: 2, entropys: 4, advantages: 8 };
  const QNAME = { advantages: 'advantage', gap: 'log-prob gap (rollout - training)', entropys: 'entropy', old_log_probs: 'log-prob (training)' };
  const ROW_H = 26, CARD_H = 170;

  // ------------------------------------------------------------------ small helpers
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of kids) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }
  const $ = (id) => document.getElementById(id);
  const fmt = (v, d = 3) => (v === null || v === undefined || Number.isNaN(v)) ? '-' : (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(1) : (+v.toPrecision(d)).toString());
  const sgn = (v) => (v === null || v === undefined) ? '-' : (v > 0 ? '+' : '') + fmt(v);

  function b64bytes(s) {
    const bin = atob(s), u = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
    return u;
  }
  async function inflate(s) {
    const stream = new Blob([b64bytes(s)]).stream().pipeThrough(new DecompressionStream('deflate'));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  let F16 = null;
  function f16() {
    if (F16) return F16;
    F16 = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) {
      const s = (h & 0x8000) ? -1 : 1, e = (h >> 10) & 31, f = h & 1023;
      F16[h] = e === 0 ? s * f * 2 ** -24 : e === 31 ? (f ? NaN : s * Infinity) : s * (1 + f / 1024) * 2 ** (e - 15);
    }
    return F16;
  }
  function planes(bytes, off, n, width) {
    const out = new Uint32Array(n);
    for (let b = 0; b < width; b++) {
      const base = off + b * n, sh = 8 * b;
      for (let i = 0; i < n; i++) out[i] |= bytes[base + i] << sh;
    }
    return out;
  }

  // ------------------------------------------------------------------ row decoding (lazy, cached)
  const cache = new Map();
  async function chunk(i) {
    if (!META.remote) { await embedded(); return CHUNKS[i]; }
    const r = await fetch(`rows/${i}`);
    if (!r.ok) throw new Error(`rows/${i}: HTTP ${r.status}`);
    return r.text();
  }
  async function rowData(i) {
    if (cache.has(i)) return cache.get(i);
    const u = await inflate(await chunk(i));
    const dv = new DataView(u.buffer);
    const jl = dv.getUint32(0, true), P = dv.getUint32(4, true), R = dv.getUint32(8, true), flags = dv.getUint32(12, true);
    let off = 16;
    const w = META.idBytes;
    const ids = planes(u, off, P + R, w); off += (P + R) * w;
    const mask = u.slice(off, off + R); off += R;
    const q = {};
    const tab = f16();
    for (const name of ['old_log_probs', 'gap', 'entropys', 'advantages']) {
      if (!(flags & QBIT[name])) continue;
      const h = planes(u, off, R, 2), a = new Float32Array(R);
      for (let k = 0; k < R; k++) a[k] = tab[h[k]];
      q[name] = a; off += 2 * R;
    }
    const row = JSON.parse(new TextDecoder().decode(u.subarray(off, off + jl)));
    const d = { row, P, R, prompt: ids.subarray(0, P), response: ids.subarray(P), mask, q };
    if (cache.size > 200) cache.delete(cache.keys().next().value);
    cache.set(i, d);
    return d;
  }
  let TEXTS = null, LOWER = null;
  async function texts() {
    if (!TEXTS && !META.remote) await embedded();
    if (!TEXTS) TEXTS = JSON.parse(new TextDecoder().decode(await inflate(META.remote ? await (await fetch('text')).text() : TEXT_B64)));
    return TEXTS;
  }
  async function lowerTexts() {
    if (!LOWER) LOWER = (await texts()).map((t) => (t[0] + '\n' + t[1]).toLowerCase());
    return LOWER;
  }

  // ------------------------------------------------------------------ state and filtering
  const S = { view: 'overview', step: 'all', color: META.quantities.includes('advantages') ? 'advantages' : (META.quantities[0] || ''),
              selected: -1, rows: new Int32Array(0), groups: [] };
  const num = (id) => { const v = $(id).value.trim(); return v === '' ? null : Number(v); };

  async function applyFilters() {
    const t = performance.now();
    const step = S.step === 'all' ? null : Number(S.step);
    const rmin = num('f-rmin'), rmax = num('f-rmax'), lmin = num('f-lmin'), lmax = num('f-lmax'), mis = num('f-mis');
    const src = $('f-src').value, tr = $('f-trunc').value, er = $('f-err').value;
    const query = $('f-q').value.trim().toLowerCase();
    const low = query ? await lowerTexts() : null;
    const out = [];
    for (let i = 0; i < N; i++) {
      if (step !== null && C.step[i] !== step) continue;
      const sc = C.score[i];
      if (rmin !== null && !(sc >= rmin)) continue;
      if (rmax !== null && !(sc <= rmax)) continue;
      if (lmin !== null && C.len[i] < lmin) continue;
      if (lmax !== null && C.len[i] > lmax) continue;
      if (mis !== null && !(C.mis[i] >= mis)) continue;
      if (src !== '' && C.src[i] !== Number(src)) continue;
      if (tr !== '' && C.trunc[i] !== Number(tr)) continue;
      if (er === '1' && !(C.toolErr[i] > 0)) continue;
      if (er === '0' && C.toolErr[i] > 0) continue;
      if (low && low[i].indexOf(query) < 0) continue;
      out.push(i);
    }
    const key = $('f-sort').value;
    const col = { reward: C.score, length: C.len, mismatch: C.mis, advantage: C.adv }[key.replace(/[+-]$/, '')];
    if (col) {
      const dir = key.endsWith('+') ? 1 : -1;
      out.sort((a, b) => dir * ((col[a] ?? -Infinity) - (col[b] ?? -Infinity)) || a - b);
    }
    S.rows = Int32Array.from(out);
    const byGroup = new Map();
    for (const i of out) { const g = C.group[i]; if (!byGroup.has(g)) byGroup.set(g, []); byGroup.get(g).push(i); }
    S.groups = [...byGroup.values()];
    $('count').textContent = `${out.length} of ${N} trajectories, ${S.groups.length} groups`;
    render();
    window.__verl.lastFilterMs = performance.now() - t;
    window.__verl.filters += 1;
  }

  // ------------------------------------------------------------------ virtual list
  function vlist(pane, count, height, draw) {
    const box = el('div', { class: 'vlist' });
    box.style.height = `${count * height}px`;
    pane.append(box);
    const paint = () => {
      const top = Math.max(0, pane.scrollTop - box.offsetTop);
      const first = Math.max(0, Math.floor(top / height) - 5);
      const last = Math.min(count, Math.ceil((top + pane.clientHeight) / height) + 5);
      box.replaceChildren();
      for (let k = first; k < last; k++) {
        const node = draw(k);
        node.style.top = `${k * height}px`;
        box.append(node);
      }
    };
    pane.onscroll = paint;
    paint();
  }

  function flagsOf(i) {
    const f = [];
    if (C.trunc[i]) f.push(el('span', { class: 'badge', title: 'truncated at max_response_length' }, 'T'));
    if (C.toolErr[i] > 0) f.push(el('span', { class: 'badge err', title: 'tool errors' }, `E${C.toolErr[i]}`));
    return f;
  }

  function renderList(pane) {
    const head = el('div', { class: 'listhead' }, el('div', { class: 'row' },
      el('span', { class: 'c n' }, '#'), el('span', { class: 'c s' }, 'step'), el('span', { class: 'c r' }, 'reward'),
      el('span', { class: 'c a' }, 'adv'), el('span', { class: 'c l' }, 'len'), el('span', { class: 'c m' }, '|gap|max'),
      el('span', { class: 'c f' }, ''), el('span', { class: 'snip' }, 'response')));
    pane.append(head);
    vlist(pane, S.rows.length, ROW_H, (k) => {
      const i = S.rows[k];
      return el('div', { class: 'row' + (i === S.selected ? ' sel' : ''), 'data-i': i, onclick: () => select(i) },
        el('span', { class: 'c n' }, i), el('span', { class: 'c s' }, C.step[i]), el('span', { class: 'c r' }, fmt(C.score[i])),
        el('span', { class: 'c a' }, sgn(C.adv[i])), el('span', { class: 'c l' }, C.len[i]), el('span', { class: 'c m' }, fmt(C.mis[i], 2)),
        el('span', { class: 'c f' }, ...flagsOf(i)), el('span', { class: 'snip' }, C.snippet[i]));
    });
  }

  function renderGroups(pane) {
    vlist(pane, S.groups.length, CARD_H, (k) => {
      const rows = S.groups[k], g = C.group[rows[0]];
      const sc = rows.map((i) => C.score[i]).filter((v) => v !== null);
      const mean = sc.length ? sc.reduce((a, b) => a + b, 0) / sc.length : null;
      const card = el('div', { class: 'gcard', 'data-group': g },
        el('div', { class: 'gh' }, `group ${META.groups[g]} · step ${C.step[rows[0]]} · ${[...new Set(rows.map((i) => META.sources[C.src[i]]))].join(', ')} · ${rows.length} samples · mean reward ${fmt(mean)}`));
      const samples = el('div', { class: 'samples' });
      for (const i of rows) {
        const cls = 'sample' + (C.adv[i] > 0 ? ' pos' : C.adv[i] < 0 ? ' neg' : '');
        samples.append(el('div', { class: cls, 'data-i': i, onclick: () => select(i) },
          el('div', { class: 'sm' }, `#${i} reward ${fmt(C.score[i])} · adv ${sgn(C.adv[i])} · ${C.len[i]} tok`, ...flagsOf(i)),
          el('div', { class: 'st' }, C.snippet[i])));
      }
      card.append(samples);
      return card;
    });
  }

  // ------------------------------------------------------------------ overview plots (inline SVG)
  const SVGNS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const c of kids) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }
  function plot(title, xs, ys, cur) {
    const W = 300, H = 170, L = 44, B = 22, T = 8, Rm = 10;
    const pts = xs.map((x, k) => [x, ys[k]]).filter((p) => p[1] !== null);
    const box = el('div', { class: 'plot', 'data-plot': title }, el('h3', {}, title));
    const s = svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    if (pts.length) {
      const x0 = Math.min(...xs), x1 = Math.max(...xs), ylo = Math.min(...pts.map((p) => p[1])), yhi = Math.max(...pts.map((p) => p[1]));
      const y0 = ylo === yhi ? ylo - 1 : ylo, y1 = ylo === yhi ? yhi + 1 : yhi;
      const X = (x) => L + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (W - L - Rm), Y = (y) => H - B - (y - y0) / (y1 - y0) * (H - B - T);
      s.append(svg('line', { x1: L, y1: H - B, x2: W - Rm, y2: H - B, stroke: '#999' }), svg('line', { x1: L, y1: T, x2: L, y2: H - B, stroke: '#999' }));
      for (const v of [y0, y1]) s.append(svg('text', { x: L - 4, y: Y(v) + 4, 'text-anchor': 'end', 'font-size': 10, fill: '#555' }, fmt(v)));
      [x0, x1].forEach((v, k) => s.append(svg('text', { x: X(v), y: H - 6, 'text-anchor': k ? 'end' : 'start', 'font-size': 10, fill: '#555' }, `step ${v}`)));
      if (cur !== null) s.append(svg('line', { x1: X(cur), y1: T, x2: X(cur), y2: H - B, stroke: '#2457c5', 'stroke-dasharray': '3 3' }));
      s.append(svg('polyline', { points: pts.map((p) => `${X(p[0])},${Y(p[1])}`).join(' '), fill: 'none', stroke: '#2457c5', 'stroke-width': 1.5 }));
      for (const [x, y] of pts) {
        const c = svg('circle', { cx: X(x), cy: Y(y), r: 3.5, fill: x === cur ? '#d97706' : '#2457c5', 'data-step': x }, svg('title', {}, `step ${x}: ${fmt(y)}`));
        c.addEventListener('click', () => setStep(String(x)));
        s.append(c);
      }
    }
    box.append(s);
    return box;
  }
  function renderOverview(pane) {
    const ov = META.overview, cur = S.step === 'all' ? null : Number(S.step);
    const box = el('div', { class: 'plots' });
    box.append(plot('mean reward', ov.step, ov.reward, cur), plot('mean response length (tokens)', ov.step, ov.length, cur),
      plot(ov.accuracyFrom === 'acc' ? 'accuracy (scorer acc)' : 'accuracy (share with score > 0)', ov.step, ov.accuracy, cur), plot('tool calls per trajectory', ov.step, ov.toolCalls, cur),
      plot('truncated share', ov.step, ov.truncated, cur));
    pane.append(box);
    const tab = el('table', { class: 'steps' }, el('tr', {}, ...['step', 'rows', 'reward', 'length', 'accuracy', 'tool calls', 'truncated'].map((h) => el('th', {}, h))));
    ov.step.forEach((st, k) => tab.append(el('tr', { class: st === cur ? 'cur' : '', onclick: () => setStep(String(st)) },
      ...[st, ov.rows[k], fmt(ov.reward[k]), fmt(ov.length[k]), fmt(ov.accuracy[k]), fmt(ov.toolCalls[k]), fmt(ov.truncated[k])].map((v) => el('td', {}, v)))));
    pane.append(tab);
  }

  function render() {
    const pane = $('pane');
    pane.onscroll = null;
    pane.replaceChildren();
    pane.scrollTop = 0;
    for (const b of document.querySelectorAll('.tabs button')) b.classList.toggle('on', b.dataset.view === S.view);
    if (S.view === 'overview') renderOverview(pane);
    else if (S.view === 'groups') renderGroups(pane);
    else renderList(pane);
  }

  // ------------------------------------------------------------------ token view
  function colour(name, v) {
    if (v === undefined || Number.isNaN(v)) return '';
    const sc = META.scales[name] || 1;
    if (name === 'advantages' || name === 'gap') {
      const x = Math.max(-1, Math.min(1, v / sc)), a = (Math.abs(x) * 0.8).toFixed(3);
      if (name === 'advantages') return x >= 0 ? `rgba(22,163,74,${a})` : `rgba(220,38,38,${a})`;
      return x >= 0 ? `rgba(234,88,12,${a})` : `rgba(37,99,235,${a})`;
    }
    if (name === 'entropys') return `rgba(217,119,6,${Math.min(1, v / sc * 0.85).toFixed(3)})`;
    return `rgba(124,58,237,${Math.min(1, -v / sc * 0.85).toFixed(3)})`;
  }
  function legend() {
    if (!S.color) return el('div', { class: 'legend' }, 'no per-token quantities in this dump');
    const sc = META.scales[S.color] || 1, div = S.color === 'advantages' || S.color === 'gap';
    const bar = el('span', { class: 'bar' });
    bar.style.background = `linear-gradient(90deg, ${div ? colour(S.color, -sc) + ', #fff, ' : '#fff, '}${colour(S.color, S.color === 'old_log_probs' ? -sc : sc)})`;
    return el('div', { class: 'legend', id: 'legend' }, `colour: ${QNAME[S.color]}`, el('span', {}, div ? fmt(-sc) : (S.color === 'old_log_probs' ? '0' : '0')), bar,
      el('span', {}, S.color === 'old_log_probs' ? fmt(-sc) : fmt(sc)), '· grey hatched blocks are not trained on (response_mask = 0)');
  }
  function hoverText(d, k) {
    const id = META.vocabIds[d.response[k]], parts = [`token ${k}`, `id ${id}`, JSON.stringify(META.vocab[d.response[k]]), d.mask[k] ? 'trained' : 'masked'];
    const lp = d.q.old_log_probs, g = d.q.gap;
    if (lp) parts.push(`logp(train) ${fmt(lp[k], 4)}`);
    if (lp && g) parts.push(`logp(rollout) ${fmt(lp[k] + g[k], 4)}`);
    if (g) parts.push(`gap ${fmt(g[k], 2)}`);
    if (d.q.entropys) parts.push(`H ${fmt(d.q.entropys[k])}`);
    if (d.q.advantages) parts.push(`A ${sgn(d.q.advantages[k])}`);
    return parts.join('  ');
  }
  function toolSpans(pieces, a, b) {
    // [start, end) token ranges of "<tool_call>...</tool_call>" inside tokens a..b
    const starts = [], text = [];
    let pos = 0;
    for (let k = a; k < b; k++) { starts.push(pos); text.push(pieces[k]); pos += pieces[k].length; }
    const s = text.join(''), out = [];
    const at = (c) => { let lo = 0, hi = starts.length - 1; while (lo < hi) { const m = (lo + hi + 1) >> 1; if (starts[m] <= c) lo = m; else hi = m - 1; } return a + lo; };
    let from = 0;
    for (;;) {
      const i = s.indexOf('<tool_call>', from);
      if (i < 0) break;
      const j = s.indexOf('</tool_call>', i);
      const end = j < 0 ? s.length : j + '</tool_call>'.length;
      out.push([at(i), at(end - 1) + 1]);
      from = end;
    }
    return out;
  }
  function tokenView(d, i) {
    const wrap = el('div', { class: 'tokens', id: 'tokens', 'data-color': S.color });
    const V = META.vocab, pieces = Array.from(d.response, (t) => V[t]);
    const prompt = el('div', { class: 'block prompt' }, el('span', { class: 'lbl' }, `prompt · ${d.P} tokens (not trained)`));
    for (const t of d.prompt) prompt.append(el('span', { class: 'tok' }, V[t]));
    wrap.append(prompt);
    const qv = d.q[S.color];
    const calls = d.row.tool_calls || [];
    let callNo = 0;
    const tok = (k) => {
      const s = el('span', { class: 'tok', 'data-k': k }, pieces[k]);
      if (d.mask[k] && qv) s.style.background = colour(S.color, qv[k]);
      return s;
    };
    let k = 0;
    while (k < d.R) {
      let e = k;
      while (e < d.R && d.mask[e] === d.mask[k]) e++;
      if (!d.mask[k]) {
        const txt = pieces.slice(k, e).join('');
        const kind = txt.includes('<tool_response>') ? 'tool response' : 'user / environment turn';
        const blk = el('div', { class: 'block masked', 'data-kind': kind }, el('span', { class: 'lbl' }, `${kind} · ${e - k} tokens (not trained)`));
        for (let j = k; j < e; j++) blk.append(tok(j));
        wrap.append(blk);
      } else {
        let j = k;
        for (const [a, b] of toolSpans(pieces, k, e)) {
          for (; j < a; j++) wrap.append(tok(j));
          const c = calls[callNo++] || {};
          const blk = el('div', { class: 'block toolcall' }, el('span', { class: 'lbl' }, `tool call · ${c.name ?? '?'} · ${c.status ?? ''}`));
          for (; j < b; j++) blk.append(tok(j));
          wrap.append(blk);
        }
        for (; j < e; j++) wrap.append(tok(j));
      }
      k = e;
    }
    const padN = C.pad[i];
    if (padN) wrap.append(el('div', { class: 'block pad', id: 'padding' }, `padding × ${padN} (not trained)`));
    wrap.addEventListener('mouseover', (ev) => {
      const kk = ev.target.dataset ? ev.target.dataset.k : undefined;
      if (kk !== undefined) $('hover').textContent = hoverText(d, Number(kk));
    });
    return wrap;
  }

  const KNOWN = new Set(['input', 'output', 'gts', 'score', 'step', 'uid', 'data_source', 'num_turns', 'tool_calls', 'messages',
    'tool_rewards', 'turn_scores', 'prompt_length', 'response_length', 'truncated', 'policy_version', 'min_global_steps', 'max_global_steps']);

  async function fixture(i) {
    const d = await rowData(i), [input, output] = (await texts())[i];
    const row = Object.assign({ input, output }, d.row);
    return {
      data_source: row.data_source, solution_str: output, ground_truth: row.gts,
      extra_info: row.extra_info ?? null, expected_score: row.score, prompt: input, step: row.step, uid: row.uid, row,
    };
  }

  async function select(i) {
    S.selected = i;
    for (const r of document.querySelectorAll('.row.sel')) r.classList.remove('sel');
    for (const r of document.querySelectorAll(`.row[data-i="${i}"]`)) r.classList.add('sel');
    const d = await rowData(i);
    if (S.selected !== i) return;
    const box = $('detail');
    box.classList.remove('empty');
    box.replaceChildren();
    delete box.dataset.row;
    const r = d.row;
    const kv = el('table', { class: 'kv', id: 'rowinfo' });
    const add = (k, v) => kv.append(el('tr', {}, el('td', {}, k), el('td', {}, typeof v === 'string' ? v : JSON.stringify(v))));
    add('row', `#${i} · step ${r.step} · group ${r.uid}`);
    add('data source', r.data_source ?? '-');
    add('reward', fmt(r.score, 4));
    add('advantage (mean)', sgn(C.adv[i]));
    add('ground truth', r.gts ?? '-');
    add('lengths', `prompt ${d.P || r.prompt_length || '-'} · response ${C.len[i]} tokens · turns ${r.num_turns ?? 1}${r.truncated ? ' · truncated' : ''}`);
    if (C.mis[i] !== null) add('|gap| max / mean', `${fmt(C.mis[i], 2)} / ${fmt(C.misMean[i], 2)}`);
    if (r.policy_version !== undefined) add('policy version', r.policy_version);
    if (r.min_global_steps !== undefined) add('policy versions', `${r.min_global_steps}..${r.max_global_steps}`);
    const details = Object.entries(r).filter(([k]) => !KNOWN.has(k));
    if (details.length) add('score details', Object.fromEntries(details));
    box.append(kv);
    if ((r.tool_calls || []).length) {
      const tc = el('table', { class: 'kv', id: 'toolcalls' });
      r.tool_calls.forEach((c, k) => tc.append(el('tr', {}, el('td', {}, `call ${k + 1}`), el('td', {}, `${c.name ?? '?'}(${c.arguments == null ? '' : JSON.stringify(c.arguments)}) → ${c.status ?? '?'}`))));
      box.append(tc);
    }
    box.append(el('button', { class: 'act', id: 'export', onclick: () => exportRow(i) }, 'Export JSON fixture'));
    box.append(el('div', { id: 'hover' }, 'hover a token for its values'), legend());
    if (d.R + d.P > 0) box.append(tokenView(d, i));
    else {
      const [input, output] = (await texts())[i];
      box.append(el('div', { class: 'tokens', id: 'tokens' }, el('div', { class: 'block prompt' }, el('span', { class: 'lbl' }, 'prompt'), input), output));
    }
    box.dataset.row = String(i);
  }
  async function exportRow(i) {
    const text = JSON.stringify(await fixture(i), null, 2);
    let pre = $('fixture');
    if (!pre) { pre = el('pre', { class: 'fixture', id: 'fixture' }); $('export').after(pre); }
    pre.textContent = text;
    const a = el('a', { href: URL.createObjectURL(new Blob([text], { type: 'application/json' })), download: `trajectory_step${C.step[i]}_row${i}.json` });
    document.body.append(a); a.click(); a.remove();
  }

  function setStep(v) { S.step = v; $('step').value = v; applyFilters(); }

  // ------------------------------------------------------------------ controls
  function controls() {
    $('title').textContent = `verl view · ${META.title}`;
    const step = $('step');
    step.append(el('option', { value: 'all' }, `all ${META.steps.length} steps`), ...META.steps.map((s) => el('option', { value: String(s) }, `step ${s}`)));
    step.addEventListener('change', () => setStep(step.value));
    $('prev').addEventListener('click', () => { const k = META.steps.indexOf(Number(S.step)); setStep(String(META.steps[k <= 0 ? 0 : k - 1])); });
    $('next').addEventListener('click', () => { const k = META.steps.indexOf(Number(S.step)); setStep(String(META.steps[Math.min(META.steps.length - 1, k + 1)])); });
    for (const b of document.querySelectorAll('.tabs button')) b.addEventListener('click', () => { S.view = b.dataset.view; render(); });
    const color = $('color');
    for (const q of ['advantages', 'gap', 'entropys', 'old_log_probs']) if (META.quantities.includes(q)) color.append(el('option', { value: q }, QNAME[q]));
    color.value = S.color;
    color.addEventListener('change', () => { S.color = color.value; if (S.selected >= 0) select(S.selected); });
    $('f-src').append(...META.sources.map((s, k) => el('option', { value: String(k) }, s)));
    for (const id of ['f-rmin', 'f-rmax', 'f-lmin', 'f-lmax', 'f-mis', 'f-q']) $(id).addEventListener('input', applyFilters);
    for (const id of ['f-src', 'f-trunc', 'f-err', 'f-sort']) $(id).addEventListener('change', applyFilters);
  }

  window.__verl = { filters: 0, lastFilterMs: null, rowData, fixture, select, applyFilters };
  controls();
  applyFilters().then(() => {
    window.__verl.scriptMs = performance.now() - t0;
    window.__verl.readyMs = performance.now();
    document.body.dataset.ready = '1';
  });
})();
