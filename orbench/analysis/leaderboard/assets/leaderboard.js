/* The OR-Bench leaderboard page: reads window.ORBENCH_LEADERBOARD (data.js) and draws the plot, the
   table and the details of a selected model. Plain JavaScript and SVG; every text from the data is
   set as text (textContent, attributes), never parsed as HTML. */
(function () {
  'use strict';
  var D = window.ORBENCH_LEADERBOARD;
  var NS = 'http://www.w3.org/2000/svg';
  function $(id) { return document.getElementById(id); }

  if (!D) {
    $('summary').textContent = 'data.js is missing beside this page: rebuild the site with orbench-leaderboard.';
    return;
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    if (attrs) { Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); }); }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }
  function sv(tag, attrs, parent) {
    var node = document.createElementNS(NS, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (parent) { parent.appendChild(node); }
    return node;
  }
  function pct(x, digits) { return (x === null || x === undefined) ? '' : (100 * x).toFixed(digits === undefined ? 1 : digits); }
  function has(x) { return x !== null && x !== undefined; }

  var SETS = {};
  D.sets.forEach(function (s, i) { s.order = i; SETS[s.key] = s; });
  var ENTRIES = {};
  D.entries.forEach(function (e) { ENTRIES[e.id] = e; });
  var state = { set: '', category: '', provider: '', judge: '', source: '', text: '', sortKey: 'rank', sortDir: 1,
                selected: null, pair: 0, published: D.published.length > 0 };

  // ------------------------------------------------------------------ texts of a cell
  function rateText(c) {
    if (has(c.rate)) {
      return pct(c.rate) + (has(c.low) ? ' [' + pct(c.low) + ', ' + pct(c.high) + ']' : ' (no interval in the record)');
    }
    if (has(c.bound_low)) { return 'no rate: bounds [' + pct(c.bound_low) + ', ' + pct(c.bound_high) + ']'; }
    return 'no rate';
  }
  function nText(c) {
    var text = has(c.n) ? String(c.n) : '';
    if (c.no_verdict) { text += ' (+' + c.no_verdict + ' without a verdict)'; }
    return text;
  }
  function pText(p) { return p < 0.001 ? p.toExponential(1) : p.toFixed(3); }
  // ranks compare like with like: an entry is ranked among those measured on the same prompts
  // (the full set, with the paper's models, or one sample), and compared with the next such entry
  function rankText(c) {
    if (!has(c.rank)) { return ''; }
    var g = c.rank_group || '';
    return g.indexOf('sample:') === 0 ? c.rank + ' in sample ' + g.slice(7) : String(c.rank);
  }
  function nextText(c) {
    if (!has(c.rank)) { return c.rank_why || ''; }
    if (!c.next) { return 'no entry ranked after it on these prompts'; }
    var t = c.next;
    if (!has(t.p_holm)) { return t.note || 'not tested'; }
    var other = ENTRIES[t.next];
    var word = t.differs ? 'differs from #' : 'not distinguishable from #';
    return word + (has(t.next_rank) ? t.next_rank : c.rank + 1) + (other ? ' ' + other.name : '') + ' (Holm p ' + pText(t.p_holm) + ', ' + t.n +
      ' prompts)' + (t.judges ? '; ' + t.judges : '');
  }
  function cardText(c, entry) {
    if (!entry) { return 'the paper\'s own figures'; }
    var card = c.card;
    if (card) {
      var cov = card.coverage || {}, kappa = card.kappa || {}, bias = card.rate_bias || {};
      var parts = [];
      var covText = 'coverage ' + (has(cov.value) ? pct(cov.value, 0) + '%' : 'n/a');
      parts.push(cov.valid ? covText : 'NOT VALID: ' + covText);
      if (has(kappa.value)) { parts.push('kappa ' + kappa.value.toFixed(2) + (kappa.ci ? ' [' + kappa.ci[0].toFixed(2) + ', ' + kappa.ci[1].toFixed(2) + ']' : '')); }
      if (has(bias.value)) {
        parts.push('rate bias ' + (100 * bias.value >= 0 ? '+' : '') + pct(bias.value) + ' pts' +
          (bias.ci ? ' [' + pct(bias.ci[0]) + ', ' + pct(bias.ci[1]) + ']' : ''));
      }
      return parts.join(' · ') + (card.labels ? ' (' + card.labels + (has(card.n) ? ', n=' + card.n : '') + ')' : '');
    }
    if (!entry.ours) { return 'no card (another tool\'s record)'; }
    if ((c.card_text || '').indexOf('never calibrated') >= 0) { return 'never calibrated'; }
    return c.card_text || 'never calibrated';
  }
  function cutText(c) {
    if (!has(c.cut_off) || !c.replies) { return ''; }
    return pct(c.cut_off / c.replies, 0) + '% (' + c.cut_off + ' of ' + c.replies + ')';
  }

  // ------------------------------------------------------------------ filters
  function fill(select, values, allLabel) {
    select.textContent = '';
    select.appendChild(el('option', { value: '' }, allLabel));
    values.forEach(function (v) { select.appendChild(el('option', { value: v[0] }, v[1])); });
  }
  function uniq(list) { return list.filter(function (v, i) { return list.indexOf(v) === i; }).sort(); }
  function setupFilters() {
    fill($('f-set'), D.sets.map(function (s) { return [s.key, s.name]; }), 'all sets');
    var providers = uniq(D.entries.map(function (e) { return e.provider; }));
    fill($('f-provider'), providers.map(function (p) { return [p, p]; }), 'all providers');
    var judges = [];
    D.entries.forEach(function (e) { Object.keys(e.cells).forEach(function (k) { judges.push(e.cells[k].judge || ''); }); });
    if (D.published.length) { judges.push(D.published[0].cells[Object.keys(D.published[0].cells)[0]].judge); }
    fill($('f-judge'), uniq(judges).map(function (j) { return [j, j]; }), 'all judges');
    var sources = uniq(D.entries.map(function (e) { return e.source; }));
    var options = sources.map(function (s) { return [s, s]; });
    if (D.published.length) { options.push(['published', 'published (the paper)']); }
    fill($('f-source'), options, 'all sources');
    fillCategories();
    fill($('pair'), D.pairs.map(function (p, i) { return [String(i), p.name + ' (' + SETS[p.x].name + ' vs ' + SETS[p.y].name + ')']; }), '');
    $('pair').removeChild($('pair').firstChild);
    var pick = $('pick');
    D.entries.slice().sort(function (a, b) { return a.name < b.name ? -1 : 1; }).forEach(function (e) {
      pick.appendChild(el('option', { value: e.id }, e.name));
    });
    if (!D.published.length) { $('show-published').disabled = true; $('show-published').checked = false; }
  }
  function fillCategories() {
    var select = $('f-category');
    var s = SETS[state.set];
    fill(select, s ? s.categories.map(function (c) { return [c, c]; }) : [], s ? 'whole set' : 'choose a set first');
    select.disabled = !s;
    state.category = '';
  }
  function entryPasses(e) {
    if (state.provider && e.provider !== state.provider) { return false; }
    if (state.source && e.source !== state.source) { return false; }
    if (state.text && e.name.toLowerCase().indexOf(state.text) < 0) { return false; }
    return true;
  }

  // ------------------------------------------------------------------ the table
  function tableRows() {
    var out = [];
    var sets = state.set ? [state.set] : D.sets.map(function (s) { return s.key; });
    D.entries.forEach(function (e) {
      if (!entryPasses(e)) { return; }
      sets.forEach(function (s) {
        var c = e.cells[s];
        if (!c || (state.judge && (c.judge || '') !== state.judge)) { return; }
        var cell = c;
        if (state.category) {
          cell = (c.categories || {})[state.category];
          if (!cell) { return; }
        }
        out.push({ entry: e, set: s, category: state.category || 'all', cell: cell, parent: c });
      });
    });
    if (state.published && !state.category && !state.provider && (!state.source || state.source === 'published')) {
      D.published.forEach(function (p) {
        if (state.text && p.model.toLowerCase().indexOf(state.text) < 0) { return; }
        sets.forEach(function (s) {
          var c = p.cells[s];
          if (!c || (state.judge && c.judge !== state.judge)) { return; }
          out.push({ pub: p, set: s, category: 'all', cell: c, parent: c });
        });
      });
    }
    return out;
  }
  var SORT = {
    // by set, then rank; a set's unranked rows (no rate, or a category) after its ranked ones; the paper's last
    rank: function (r) {
      if (r.category === 'all' && has(r.parent.rank)) { return SETS[r.set].order * 1e6 + (r.parent.rank_order || r.parent.rank); }
      return r.entry ? SETS[r.set].order * 1e6 + 9e5 : null;
    },
    name: function (r) { return r.entry ? r.entry.name : r.pub.model; },
    source: function (r) { return r.entry ? r.entry.source : 'published'; },
    provider: function (r) { return r.entry ? r.entry.provider : ''; },
    set: function (r) { return SETS[r.set].order; },
    category: function (r) { return r.category; },
    rate: function (r) { return has(r.cell.rate) ? r.cell.rate : null; },
    n: function (r) { return has(r.cell.n) ? r.cell.n : null; },
    next: function (r) { var t = r.entry && r.category === 'all' ? r.parent.next : null; return t && has(t.p_holm) ? t.p_holm : null; },
    judge: function (r) { return r.parent.judge || ''; },
    card: function (r) { var c = r.parent.card; return c && c.coverage && has(c.coverage.value) ? c.coverage.value : null; },
    cutoff: function (r) { return has(r.parent.cut_off) && r.parent.replies ? r.parent.cut_off / r.parent.replies : null; },
    date: function (r) { return r.entry ? r.entry.date || null : null; }
  };
  function compare(a, b) {
    var f = SORT[state.sortKey], x = f(a), y = f(b);
    if (x === null && y === null) { return SORT.name(a) < SORT.name(b) ? -1 : SORT.name(a) > SORT.name(b) ? 1 : SETS[a.set].order - SETS[b.set].order; }
    if (x === null) { return 1; }
    if (y === null) { return -1; }
    if (x < y) { return -state.sortDir; }
    if (x > y) { return state.sortDir; }
    var n = SORT.name(a) < SORT.name(b) ? -1 : SORT.name(a) > SORT.name(b) ? 1 : 0;
    return n || SETS[a.set].order - SETS[b.set].order;
  }
  function cell(tr, text, cls, title) {
    var td = el('td', cls ? { 'class': cls } : null, text);
    if (title) { td.title = title; }
    tr.appendChild(td);
    return td;
  }
  function renderTable() {
    var rows = tableRows().sort(compare);
    var body = $('board').tBodies[0];
    var frag = document.createDocumentFragment();
    rows.forEach(function (r) {
      var e = r.entry, c = r.cell, p = r.parent;
      var tr = el('tr', { 'data-set': r.set, 'data-category': r.category });
      if (e) { tr.setAttribute('data-id', e.id); } else { tr.className = 'published'; }
      if (e && e.id === state.selected) { tr.classList.add('sel'); }
      cell(tr, r.category === 'all' ? rankText(p) : '', 'num', p.measured_on || p.rank_why || '');
      var nameCell = cell(tr, '');
      var name = el('span', e ? { 'class': 'name', tabindex: '0', role: 'button' } : null, e ? e.name : r.pub.model);
      nameCell.appendChild(name);
      cell(tr, e ? e.source : 'published');
      cell(tr, e ? e.provider : '');
      cell(tr, SETS[r.set].name);
      cell(tr, r.category);
      cell(tr, rateText(c), 'num' + (has(c.rate) ? '' : ' bounds'), c.method || c.why || '');
      cell(tr, nText(c), 'num', r.category === 'all' && p.measured_on ? 'measured on ' + p.measured_on : '');
      var nt = e && r.category === 'all' ? nextText(p) : '';
      cell(tr, nt, p.next && p.next.differs ? 'differs' : '');
      cell(tr, p.judge || '');
      var ct = cardText(p, e);
      cell(tr, ct, ct.indexOf('NOT VALID') === 0 ? 'invalid' : '', e ? p.card_text : '');
      cell(tr, e ? cutText(p) : '', 'num');
      cell(tr, e && e.date ? e.date.slice(0, 10) : '');
      frag.appendChild(tr);
    });
    body.textContent = '';
    body.appendChild(frag);
    $('count').textContent = rows.length + ' row' + (rows.length === 1 ? '' : 's');
    Array.prototype.forEach.call($('board').tHead.rows[0].cells, function (th) {
      th.classList.remove('asc', 'desc');
      if (th.getAttribute('data-key') === state.sortKey) { th.classList.add(state.sortDir > 0 ? 'asc' : 'desc'); }
    });
  }

  // ------------------------------------------------------------------ the plot
  var W = 660, H = 460, M = { l: 58, r: 16, t: 14, b: 50 };
  function sx(v) { return M.l + (W - M.l - M.r) * v / 100; }
  function sy(v) { return H - M.b - (H - M.t - M.b) * v / 100; }
  function axes(svgNode, pair) {
    var defs = sv('defs', {}, svgNode);
    [['hatch-ours', '#1f6fd1'], ['hatch-other', '#d9730d']].forEach(function (h) {
      var pat = sv('pattern', { id: h[0], width: 4, height: 4, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' }, defs);
      sv('rect', { width: 4, height: 4, fill: '#fff' }, pat);
      sv('rect', { width: 2, height: 4, fill: h[1] }, pat);
    });
    for (var v = 0; v <= 100; v += 20) {
      sv('line', { x1: sx(v), x2: sx(v), y1: sy(0), y2: sy(100), 'class': 'grid' }, svgNode);
      sv('line', { x1: sx(0), x2: sx(100), y1: sy(v), y2: sy(v), 'class': 'grid' }, svgNode);
      sv('text', { x: sx(v), y: sy(0) + 16, 'text-anchor': 'middle' }, svgNode).textContent = v;
      sv('text', { x: sx(0) - 8, y: sy(v) + 4, 'text-anchor': 'end' }, svgNode).textContent = v;
    }
    sv('line', { x1: sx(0), x2: sx(100), y1: sy(0), y2: sy(0), 'class': 'axis' }, svgNode);
    sv('line', { x1: sx(0), x2: sx(0), y1: sy(0), y2: sy(100), 'class': 'axis' }, svgNode);
    sv('text', { x: sx(50), y: H - 10, 'text-anchor': 'middle', 'class': 'label' }, svgNode).textContent =
      SETS[pair.x].name + ': prompts refused (%)';
    sv('text', { x: 14, y: sy(50), 'text-anchor': 'middle', 'class': 'label', transform: 'rotate(-90 14 ' + sy(50) + ')' }, svgNode).textContent =
      SETS[pair.y].name + ': prompts refused (%)';
  }
  function tipLines(name, source, pair, cx, cy, judge, others) {
    var lines = [name, source, SETS[pair.x].name + ': ' + rateText(cx), SETS[pair.y].name + ': ' + rateText(cy),
                 'judge: ' + judge];
    if (others && others.length) { lines.push('at the same place: ' + others.join('; ')); }
    return lines.join('\n');
  }
  function place(c) { return has(c.rate) ? String(c.rate) : 'b' + c.bound_low + ',' + c.bound_high; }
  function showTip(evt, text) {
    var tip = $('tip'), wrap = $('plot-wrap').getBoundingClientRect();
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = Math.min(evt.clientX - wrap.left + 12, wrap.width - 200) + 'px';
    tip.style.top = (evt.clientY - wrap.top + 12) + 'px';
  }
  function hideTip() { $('tip').hidden = true; }
  function drawEntry(g, e, cx, cy, cls) {
    var xr = has(cx.rate), yr = has(cy.rate);
    var x = xr ? cx.rate * 100 : 50 * (cx.bound_low + cx.bound_high), y = yr ? cy.rate * 100 : 50 * (cy.bound_low + cy.bound_high);
    if (xr && has(cx.low)) { sv('line', { x1: sx(100 * cx.low), x2: sx(100 * cx.high), y1: sy(y), y2: sy(y), 'class': 'ci ' + cls }, g); }
    if (yr && has(cy.low)) { sv('line', { x1: sx(x), x2: sx(x), y1: sy(100 * cy.low), y2: sy(100 * cy.high), 'class': 'ci ' + cls }, g); }
    if (xr && yr) {
      sv('circle', { cx: sx(x), cy: sy(y), r: 5, 'class': cls }, g);
      return;
    }
    // no rate on an axis: its bounds as a hatched bar (a rectangle when both axes have bounds only)
    var x0 = xr ? x - 0.6 : 100 * cx.bound_low, x1 = xr ? x + 0.6 : 100 * cx.bound_high;
    var y0 = yr ? y - 0.8 : 100 * cy.bound_low, y1 = yr ? y + 0.8 : 100 * cy.bound_high;
    sv('rect', { x: sx(x0), y: sy(y1), width: Math.max(sx(x1) - sx(x0), 2), height: Math.max(sy(y0) - sy(y1), 2),
                 'class': 'bar ' + cls, fill: 'url(#hatch-' + cls + ')' }, g);
  }
  function plottable(c) { return c && (has(c.rate) || has(c.bound_low)); }
  function renderPlot() {
    var svgNode = $('plot');
    svgNode.textContent = '';
    var pair = D.pairs[state.pair];
    if (!pair) {
      sv('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', 'class': 'label' }, svgNode).textContent =
        'No entry has both a safe and an unsafe set.';
      return;
    }
    axes(svgNode, pair);
    if (state.published && pair.x === 'hard') {
      if (D.published_fit) {
        var f = D.published_fit, pts = [];
        var xs = D.published.map(function (p) { return 100 * p.cells.hard.rate; });
        var lo = Math.min.apply(null, xs), hi = Math.max.apply(null, xs);
        for (var i = 0; i <= 60; i++) {
          var xv = lo + (hi - lo) * i / 60, yv = f[0] * xv * xv + f[1] * xv + f[2];
          if (yv >= 0 && yv <= 100) { pts.push(sx(xv).toFixed(1) + ',' + sy(yv).toFixed(1)); }
        }
        sv('polyline', { points: pts.join(' '), 'class': 'fit' }, svgNode);
      }
      D.published.forEach(function (p) {
        if (state.text && p.model.toLowerCase().indexOf(state.text) < 0) { return; }
        var dot = sv('circle', { cx: sx(100 * p.cells.hard.rate), cy: sy(100 * p.cells.toxic.rate), r: 3.5, 'class': 'pub' }, svgNode);
        dot.addEventListener('mousemove', function (evt) {
          showTip(evt, tipLines(p.model, 'published (the paper)', pair, p.cells.hard, p.cells.toxic, p.cells.hard.judge));
        });
        dot.addEventListener('mouseleave', hideTip);
      });
    }
    var shown = D.entries.filter(function (e) {
      var cx = e.cells[pair.x], cy = e.cells[pair.y];
      if (!entryPasses(e) || !plottable(cx) || !plottable(cy)) { return false; }
      return !state.judge || cx.judge === state.judge || cy.judge === state.judge;
    });
    var at = {};  // entries drawn at the same place: each one's tip names the others
    shown.forEach(function (e) {
      var key = place(e.cells[pair.x]) + '|' + place(e.cells[pair.y]);
      (at[key] = at[key] || []).push(e.name);
    });
    shown.forEach(function (e) {
      var cx = e.cells[pair.x], cy = e.cells[pair.y];
      var others = at[place(cx) + '|' + place(cy)].filter(function (n) { return n !== e.name; });
      var cls = e.ours ? 'ours' : 'other';
      var g = sv('g', { 'class': 'point ' + cls + (e.id === state.selected ? ' sel' : (state.selected ? ' dim' : '')), 'data-id': e.id }, svgNode);
      drawEntry(g, e, cx, cy, cls);
      var judge = cx.judge === cy.judge ? cx.judge : cx.judge + '; ' + cy.judge;
      g.addEventListener('mousemove', function (evt) { showTip(evt, tipLines(e.name, e.source, pair, cx, cy, judge, others)); });
      g.addEventListener('mouseleave', hideTip);
      g.addEventListener('click', function () { select(e.id === state.selected ? null : e.id); });
    });
  }

  // ------------------------------------------------------------------ details of a selected model
  function dl(parent, pairs) {
    var list = el('dl');
    pairs.forEach(function (p) {
      if (p[1] === null || p[1] === undefined || p[1] === '') { return; }
      list.appendChild(el('dt', null, p[0]));
      var dd = el('dd');
      if (p[1] instanceof Node) { dd.appendChild(p[1]); } else { dd.textContent = String(p[1]); }
      list.appendChild(dd);
    });
    parent.appendChild(list);
  }
  function links(items) {
    var span = el('span');
    items.forEach(function (it, i) {
      if (i) { span.appendChild(document.createTextNode(', ')); }
      var a = el('a', { href: it.href }, it.name + (it.set ? ' (' + it.set + ')' : ''));
      if (it.how && it.how !== 'copied') { a.title = it.how; }
      span.appendChild(a);
    });
    return span;
  }
  function renderDetails() {
    var box = $('details');
    box.textContent = '';
    var e = ENTRIES[state.selected];
    box.hidden = !e;
    if (!e) { return; }
    box.appendChild(el('h3', null, e.name));
    dl(box, [['model', e.model_id], ['provider', e.provider], ['source', e.source + (e.source_detail ? ' (' + e.source_detail + ')' : '')],
             ['date', e.date], ['report', e.report], ['records', e.records.length ? links(e.records) : 'none'],
             ['meta files', e.provenance.length ? links(e.provenance) : (e.ours ? 'none (a record read without its report)' : 'none (another tool\'s record)')]]);
    var table = el('table');
    var head = el('tr');
    ['set', 'rejected % [95% CI]', 'n', 'measured on', 'rank', 'judge', 'judge card', 'cut off', 'temperature', 'system prompt', 'max tokens', 'samples', 'vs next rank']
      .forEach(function (h) { head.appendChild(el('th', null, h)); });
    table.appendChild(head);
    Object.keys(e.cells).sort(function (a, b) { return SETS[a].order - SETS[b].order; }).forEach(function (s) {
      var c = e.cells[s], st = c.settings || {}, tr = el('tr', { 'data-set': s });
      [SETS[s].name, rateText(c), nText(c), c.measured_on || '', rankText(c) || c.rank_why || '', c.judge, c.card ? cardText(c, e) : (c.card_text || cardText(c, e)), cutText(c),
       has(st.temperature) ? st.temperature : 'not stated', st.system_prompt || 'not stated',
       has(st.max_tokens) ? st.max_tokens : 'not stated', has(st.samples) ? st.samples : 'not stated', nextText(c)]
        .forEach(function (v) { tr.appendChild(el('td', null, v)); });
      table.appendChild(tr);
    });
    box.appendChild(table);
    e.warnings.concat(e.notes).forEach(function (w) { box.appendChild(el('p', { 'class': 'warn' }, w)); });
    e.left_out.forEach(function (item) {
      box.appendChild(el('p', { 'class': 'warn' }, 'left out of the record: ' + (item.cell || item.set) + ': ' + (item.why || '')));
    });
  }
  function select(id) {
    state.selected = id;
    $('pick').value = id || '';
    renderPlot();
    renderTable();
    renderDetails();
  }

  // ------------------------------------------------------------------ wiring
  function renderAll() { renderPlot(); renderTable(); renderDetails(); }
  function init() {
    var ours = D.entries.filter(function (e) { return e.ours; }).length;
    $('summary').textContent = D.entries.length + ' entries (' + ours + ' from orbench reports, ' + (D.entries.length - ours) +
      ' from other tools\' records)' + (D.published.length ? ', and the ' + D.published.length + ' models the OR-Bench paper published' : '') +
      '. Built ' + D.built + (D.version ? ' by orbench ' + D.version : '') + '.';
    setupFilters();
    $('f-set').addEventListener('change', function (evt) { state.set = evt.target.value; fillCategories(); renderTable(); });
    $('f-category').addEventListener('change', function (evt) { state.category = evt.target.value; renderTable(); });
    $('f-provider').addEventListener('change', function (evt) { state.provider = evt.target.value; renderAll(); });
    $('f-judge').addEventListener('change', function (evt) { state.judge = evt.target.value; renderAll(); });
    $('f-source').addEventListener('change', function (evt) { state.source = evt.target.value; renderAll(); });
    $('f-text').addEventListener('input', function (evt) { state.text = evt.target.value.trim().toLowerCase(); renderAll(); });
    $('pair').addEventListener('change', function (evt) { state.pair = Number(evt.target.value); renderPlot(); });
    $('show-published').addEventListener('change', function (evt) { state.published = evt.target.checked; renderAll(); });
    $('pick').addEventListener('change', function (evt) { select(evt.target.value || null); });
    $('board').tHead.addEventListener('click', function (evt) {
      var key = evt.target.getAttribute && evt.target.getAttribute('data-key');
      if (!key) { return; }
      state.sortDir = state.sortKey === key ? -state.sortDir : 1;
      state.sortKey = key;
      renderTable();
    });
    $('board').tBodies[0].addEventListener('click', function (evt) {
      var target = evt.target;
      if (!target.classList || !target.classList.contains('name')) { return; }
      var id = target.parentNode.parentNode.getAttribute('data-id');
      select(id === state.selected ? null : id);
    });
    $('board').tBodies[0].addEventListener('keydown', function (evt) {
      if ((evt.key === 'Enter' || evt.key === ' ') && evt.target.classList.contains('name')) { evt.preventDefault(); evt.target.click(); }
    });
    document.addEventListener('keydown', function (evt) { if (evt.key === 'Escape' && state.selected) { select(null); } });
    var notes = $('notes');
    (D.notes || []).forEach(function (n) { notes.appendChild(el('li', null, n)); });
    if (D.published_citation) { notes.appendChild(el('li', null, 'Published models: ' + D.published_citation)); }
    renderAll();
    document.body.setAttribute('data-ready', '1');
    // the first frame after the page is built: drawn (bench/leaderboard_open.py reads it; ms since the navigation began)
    requestAnimationFrame(function () { requestAnimationFrame(function () { window.ORBENCH_DRAWN_MS = performance.now(); }); });
  }
  init();
}());
