// Chaperone's live view: the sessions of the audit log(s), one session's
// processes, timeline and events, and the questions waiting for a person.
//
// Every value on this page comes from an agent's actions (URLs, argv, file
// names, model output) and is untrusted. The page therefore builds its DOM
// with createElement / createElementNS and textContent only: no innerHTML,
// no markup built from strings, no href or src from data. The server's
// Content-Security-Policy forbids inline script and style besides.
'use strict';

(() => {
  // ---------------------------------------------------------------- helpers

  const $ = (sel) => document.querySelector(sel);

  // el builds an element. attrs keys are literals of this file (never
  // data); values are set as text (textContent, data-*, title).
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    setAttrs(e, attrs);
    add(e, ...kids);
    return e;
  }

  const SVG = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVG, tag);
    setAttrs(e, attrs);
    add(e, ...kids);
    return e;
  }

  function setAttrs(e, attrs) {
    if (!attrs) return;
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') e.textContent = String(v);
      else if (k === 'class') e.setAttribute('class', v);
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
  }

  // add appends kids (nodes, text, arrays of them; null and false are
  // nothing) to parent.
  function add(parent, ...kids) {
    for (const kid of kids) {
      if (kid === undefined || kid === null || kid === false) continue;
      if (Array.isArray(kid)) {
        add(parent, ...kid);
      } else if (kid instanceof Node) {
        parent.append(kid);
      } else {
        parent.append(document.createTextNode(String(kid)));
      }
    }
  }

  function clear(e) {
    while (e.firstChild) e.firstChild.remove();
  }

  const pad = (n, w = 2) => String(n).padStart(w, '0');

  function parseTime(s) {
    if (!s) return null;
    const t = new Date(s);
    return isNaN(t) || t.getUTCFullYear() < 1971 ? null : t;
  }

  // Times are UTC, as in `chaperone events` and `chaperone sessions`.
  function fmtClock(s) {
    const t = parseTime(s);
    if (!t) return '';
    return `${pad(t.getUTCHours())}:${pad(t.getUTCMinutes())}:${pad(t.getUTCSeconds())}.${pad(t.getUTCMilliseconds(), 3)}`;
  }

  function fmtDate(s) {
    const t = parseTime(s);
    if (!t) return '';
    return `${t.getUTCFullYear()}-${pad(t.getUTCMonth() + 1)}-${pad(t.getUTCDate())} ${pad(t.getUTCHours())}:${pad(t.getUTCMinutes())}:${pad(t.getUTCSeconds())}`;
  }

  function fmtDuration(ms) {
    if (ms === null || ms === undefined || ms < 0) return '';
    if (ms < 1000) return `${Math.round(ms)}ms`;
    let s = Math.floor(ms / 1000);
    if (s < 60) return `${(ms / 1000).toFixed(1)}s`;
    const h = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    s %= 60;
    return h > 0 ? `${h}h${pad(m)}m${pad(s)}s` : `${m}m${pad(s)}s`;
  }

  // fmtCount shortens as the terminal views do: 11.5k, 1.2M.
  function fmtCount(n) {
    n = Number(n) || 0;
    if (n < 10000) return String(n);
    if (n < 1e6) return `${(n / 1000).toFixed(1).replace(/\.0$/, '')}k`;
    return `${(n / 1e6).toFixed(1).replace(/\.0$/, '')}M`;
  }

  const shortID = (id) => (id && id.length > 12 ? id.slice(0, 12) : id || '');
  const base = (p) => {
    if (!p) return '';
    const parts = String(p).split('/').filter(Boolean);
    return parts.length ? parts[parts.length - 1] : String(p);
  };

  function procName(p) {
    if (!p) return '';
    return base(p.exe) || base(p.argv && p.argv[0]) || (p.lineage && p.lineage[p.lineage.length - 1]) || '?';
  }

  // The placeholder a secret is replaced by: [REDACTED:<rule>:<hex>].
  const placeholderRE = /\[REDACTED:([a-z0-9-]+):([0-9a-f]{4,})\]/g;

  // withPlaceholders returns text as nodes, each placeholder a
  // mark.placeholder labelled by its rule (the value is not in the log:
  // the placeholder is all there is).
  function withPlaceholders(text) {
    const out = [];
    text = String(text);
    let last = 0;
    placeholderRE.lastIndex = 0;
    for (let m; (m = placeholderRE.exec(text)) !== null;) {
      if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
      out.push(el('mark', {
        class: 'placeholder',
        'data-rule': m[1],
        title: `a secret (rule ${m[1]}) was replaced by this placeholder before the request left; its value is not recorded`,
        text: m[0],
      }));
      last = m.index + m[0].length;
    }
    if (last < text.length) out.push(document.createTextNode(text.slice(last)));
    return out;
  }

  class HTTPError extends Error {
    constructor(status, msg) {
      super(msg);
      this.status = status;
    }
  }

  async function api(path, init) {
    const r = await fetch(path, Object.assign({ credentials: 'same-origin', headers: { Accept: 'application/json' } }, init));
    if (r.status === 401) {
      notice('Not signed in: open the URL that chaperone printed (it carries a one-time token).', 'error');
      throw new HTTPError(401, 'unauthorized');
    }
    let body = null;
    try {
      body = await r.json();
    } catch (e) {
      body = null;
    }
    if (!r.ok) throw new HTTPError(r.status, (body && body.error) || `${path}: ${r.status}`);
    return body;
  }

  function notice(text, kind) {
    const n = $('#notice');
    if (!text) {
      n.hidden = true;
      return;
    }
    n.textContent = text;
    n.dataset.kind = kind || 'info';
    n.hidden = false;
  }

  // throttle runs fn at most once per ms, the last call winning.
  function throttle(fn, ms) {
    let timer = null;
    let again = false;
    return function run() {
      if (timer) {
        again = true;
        return;
      }
      fn();
      timer = setTimeout(() => {
        timer = null;
        if (again) {
          again = false;
          run();
        }
      }, ms);
    };
  }

  // ---------------------------------------------------------------- state

  const state = {
    sessions: new Map(), // id → summary
    questions: new Map(), // id → question
    view: null, // the open session's view, or null on the list
  };

  // ---------------------------------------------------------------- stream

  // One EventSource at a time: a new one (another route) replaces the
  // others only once open, so the server never sees the page leave (it
  // watches the sessions' questions while a page is connected).
  let stream = null;
  const streams = new Set();

  function openStream(session) {
    const url = '/api/stream' + (session ? `?session=${encodeURIComponent(session)}` : '');
    const es = new EventSource(url);
    stream = es;
    streams.add(es);
    const drop = (x) => {
      x.close();
      streams.delete(x);
    };
    es.addEventListener('open', () => {
      if (stream !== es) {
        drop(es); // replaced meanwhile
        return;
      }
      for (const other of [...streams]) if (other !== es) drop(other);
      setConn('live');
      onStreamOpen();
    });
    es.addEventListener('error', () => {
      if (stream !== es) return;
      if (es.readyState !== EventSource.CLOSED) {
        setConn('reconnecting');
        return;
      }
      // Refused (401: the cookie is gone) or the server went away: try
      // again in a while.
      setConn('closed');
      drop(es);
      setTimeout(() => { if (stream === es) openStream(session); }, 3000);
    });
    // Until the new stream opens, the old one still delivers: what both
    // deliver is the same (records are kept once, by seq).
    const on = (name, fn) => es.addEventListener(name, (e) => fn(JSON.parse(e.data)));
    on('record', onRecord);
    on('session', onSession);
    on('question', onQuestion);
    on('answered', onAnswered);
    on('reset', onReset);
  }

  // onReset: the log started over (truncated or replaced), and with it
  // the sessions and their records' numbers: everything is read again.
  function onReset() {
    loadSessions();
    const v = state.view;
    if (v) {
      loadSession(v);
      loadTimeline(v);
      reloadEvents();
    }
  }

  function setConn(s) {
    const c = $('#conn');
    c.dataset.state = s;
    c.textContent = { live: '● live', reconnecting: 'reconnecting…', closed: 'disconnected', connecting: 'connecting…' }[s] || s;
  }

  function onStreamOpen() {
    // Whatever happened while the stream was down (or before it opened).
    loadSessions();
    loadQuestions();
    const v = state.view;
    if (v && v.loaded) fetchNewer(v);
  }

  // ---------------------------------------------------------------- sessions list

  async function loadSessions() {
    try {
      const body = await api('/api/sessions');
      const seen = new Set();
      for (const s of body.sessions || []) {
        seen.add(s.id);
        state.sessions.set(s.id, s);
      }
      // The log started over (truncated, replaced): what it no longer
      // holds goes.
      for (const id of [...state.sessions.keys()]) {
        if (seen.has(id)) continue;
        state.sessions.delete(id);
        const r = rows.get(id);
        if (r) r.tr.remove();
        rows.delete(id);
      }
      renderSessions();
    } catch (e) {
      if (e.status !== 401) notice(`sessions: ${e.message}`, 'error');
    }
  }

  function onSession(s) {
    state.sessions.set(s.id, s);
    scheduleSessions();
    const v = state.view;
    if (v && v.id === s.id) {
      v.summary = s;
      renderHead(v);
      v.refreshTree();
    }
  }

  let sessionsQueued = false;
  function scheduleSessions() {
    if (sessionsQueued) return;
    sessionsQueued = true;
    requestAnimationFrame(() => {
      sessionsQueued = false;
      renderSessions();
    });
  }

  function sessionDuration(s) {
    if (s.duration_ms !== undefined && s.duration_ms !== null) return s.duration_ms;
    const start = parseTime(s.start);
    if (!start) return null;
    const end = s.running ? Date.now() : (parseTime(s.end) || parseTime(s.last));
    return end ? end - start : null;
  }

  function questionsOf(id) {
    let n = 0;
    for (const q of state.questions.values()) if (q.session === id) n++;
    return n;
  }

  // rows keeps each session's row element: a row is updated in place
  // (never replaced under a pointer about to click it).
  const rows = new Map(); // id → {tr, key}

  // While a button is down on the list or the tree, what it is on is left
  // as it is: an element replaced between press and release would take
  // the click with it (a running session's counts change with each of its
  // events, its tree with each new process). They are drawn on release.
  let pressed = null; // '#sessions', '#tree' or null
  document.addEventListener('pointerdown', (e) => {
    const on = e.target.closest ? e.target.closest('#sessions, #tree') : null;
    pressed = on ? '#' + on.id : null;
  }, true);
  const release = () => {
    const was = pressed;
    pressed = null;
    if (was === '#sessions') scheduleSessions();
    if (was === '#tree' && state.view && state.view.treeStale) {
      const v = state.view;
      requestAnimationFrame(() => { if (state.view === v && !pressed) renderTree(v); });
    }
  };
  document.addEventListener('pointerup', release, true);
  document.addEventListener('pointercancel', release, true);

  function renderSessions() {
    if (pressed === '#sessions') return; // again on release
    const list = [...state.sessions.values()].sort((a, b) => {
      const ta = parseTime(a.start) || 0;
      const tb = parseTime(b.start) || 0;
      return tb - ta || (a.id < b.id ? 1 : -1);
    });
    const tbody = $('#sessions tbody');
    let prev = null;
    for (const s of list) {
      const key = JSON.stringify(s) + questionsOf(s.id);
      let r = rows.get(s.id);
      if (!r) {
        const tr = el('tr', { 'data-session': s.id, onclick: () => { location.hash = `#/s/${encodeURIComponent(s.id)}`; } });
        r = { tr, key: '' };
        rows.set(s.id, r);
      }
      if (r.key !== key) {
        r.key = key;
        r.tr.className = s.running ? 'running' : 'ended';
        r.tr.replaceChildren(...sessionCells(s));
      }
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== r.tr) tbody.insertBefore(r.tr, want);
      prev = r.tr;
    }
    $('#sessions-empty').hidden = list.length > 0;
    $('#sessions-count').textContent = list.length ? `(${list.length})` : '';
  }

  function sessionCells(s) {
    const running = !!s.running;
    const waiting = questionsOf(s.id);
    const num = (col, v, title) => el('td', { class: 'num', 'data-col': col, title }, v);
    const uid = s.agent_uid === undefined || s.agent_uid === null ? '' : `uid ${s.agent_uid}`;
    return [
      el('td', { class: 'id mono' }, el('a', { href: `#/s/${encodeURIComponent(s.id)}`, text: shortID(s.id), title: s.id }),
        waiting ? el('span', { class: 'badge ask', text: `${waiting} waiting`, title: 'questions waiting for an answer' }) : null),
      el('td', { class: 'agent', title: (s.command || []).join(' ') }, s.agent || base((s.command || [])[0]) || '?'),
      el('td', { class: 'mono' }, uid),
      el('td', {}, s.mode || ''),
      el('td', { class: 'mono' }, fmtDate(s.start)),
      el('td', { class: 'num duration', 'data-col': 'duration' }, fmtDuration(sessionDuration(s))),
      num('requests', fmtCount(s.requests)),
      el('td', { class: s.denials ? 'num deny' : 'num', 'data-col': 'denials' }, fmtCount(s.denials)),
      num('redactions', fmtCount(s.redactions)),
      num('llm_calls', fmtCount(s.llm_calls)),
      num('tokens', fmtCount(s.tokens), `${s.input_tokens || 0} in, ${s.output_tokens || 0} out`),
      num('events', fmtCount(s.events)),
      el('td', {}, el('span', { class: `state ${running ? 'running' : 'ended'}`, text: running ? 'running' : 'ended' }),
        !running && s.exit_code !== undefined && s.exit_code !== null ? el('span', { class: 'muted', text: ` exit ${s.exit_code}` }) : null),
    ];
  }

  // Running sessions' durations tick.
  setInterval(() => {
    if (state.view) {
      const v = state.view;
      if (v.summary && v.summary.running) renderHead(v);
      return;
    }
    for (const row of document.querySelectorAll('#sessions tr.running')) {
      const s = state.sessions.get(row.dataset.session);
      const cell = row.querySelector('.duration');
      if (s && cell) cell.textContent = fmtDuration(sessionDuration(s));
    }
  }, 1000);

  // ---------------------------------------------------------------- questions

  async function loadQuestions() {
    try {
      const body = await api('/api/questions');
      const seen = new Set();
      for (const q of body.questions || []) {
        seen.add(q.id);
        state.questions.set(q.id, q);
      }
      for (const id of [...state.questions.keys()]) if (!seen.has(id)) state.questions.delete(id);
      renderQuestions();
    } catch (e) {
      if (e.status !== 401) notice(`questions: ${e.message}`, 'error');
    }
  }

  function onQuestion(q) {
    state.questions.set(q.id, q);
    renderQuestions();
  }

  function onAnswered(a) {
    state.questions.delete(a.id);
    renderQuestions();
  }

  // cards keeps each question's card: a card stays as it is (its buttons
  // never replaced under a click) until its question goes.
  const cards = new Map(); // id → element

  function renderQuestions() {
    const box = $('#questions');
    const qs = [...state.questions.values()].sort((a, b) => (parseTime(a.asked) || 0) - (parseTime(b.asked) || 0));
    for (const [id, card] of cards) {
      if (!state.questions.has(id)) {
        card.remove();
        cards.delete(id);
      }
    }
    let prev = null;
    for (const q of qs) {
      let card = cards.get(q.id);
      if (!card) {
        card = questionCard(q);
        cards.set(q.id, card);
      }
      const want = prev ? prev.nextSibling : box.firstChild;
      if (want !== card) box.insertBefore(card, want);
      prev = card;
    }
    box.hidden = qs.length === 0;
    document.title = `${qs.length ? `(${qs.length} waiting) ` : ''}Chaperone · live view`;
    scheduleSessions();
  }

  function questionCard(q) {
    const status = el('span', { class: 'q-status' });
    const left = el('span', { class: 'q-deadline muted' });
    const tick = () => {
      const d = parseTime(q.deadline);
      if (!d) return;
      const ms = d - Date.now();
      left.textContent = ms > 0 ? `${Math.ceil(ms / 1000)}s left` : 'timed out';
    };
    tick();
    const card = el('div', { class: 'question', 'data-id': q.id, role: 'alert' });
    const answer = async (kind) => {
      for (const b of card.querySelectorAll('button')) b.disabled = true;
      status.textContent = 'sending…';
      try {
        await api(`/api/questions/${encodeURIComponent(q.id)}`, {
          method: 'POST',
          credentials: 'same-origin',
          headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
          body: JSON.stringify({ allow: kind !== 'deny', always: kind === 'session' }),
        });
        state.questions.delete(q.id);
        renderQuestions();
      } catch (e) {
        if (e.status === 404) { // answered elsewhere, timed out
          state.questions.delete(q.id);
          renderQuestions();
          return;
        }
        status.textContent = e.message;
        for (const b of card.querySelectorAll('button')) b.disabled = false;
      }
    };
    add(card, [
      el('div', { class: 'q-head' },
        el('span', { class: 'q-label', text: 'question' }),
        el('a', { class: 'mono', href: `#/s/${encodeURIComponent(q.session)}`, text: `session ${shortID(q.session)}`, title: q.session }),
        el('span', { class: 'muted', text: ` asked ${fmtClock(q.asked)} · ` }), left),
      el('div', { class: 'q-summary mono', text: q.summary || '' }),
      (q.rule || q.reason) ? el('div', { class: 'q-reason' },
        q.rule ? el('span', { class: 'rule mono', text: q.rule }) : null,
        q.reason ? el('span', { text: ` ${q.reason}` }) : null) : null,
      el('div', { class: 'q-buttons' },
        el('button', { type: 'button', class: 'allow', 'data-answer': 'once', text: 'Allow once', onclick: () => answer('once') }),
        el('button', { type: 'button', class: 'allow', 'data-answer': 'session', text: 'Allow for the session', onclick: () => answer('session') }),
        el('button', { type: 'button', class: 'deny', 'data-answer': 'deny', text: 'Deny', onclick: () => answer('deny') }),
        status),
    ]);
    const timer = setInterval(() => {
      if (!card.isConnected) {
        clearInterval(timer);
        return;
      }
      tick();
    }, 1000);
    return card;
  }

  // ---------------------------------------------------------------- session view

  const PAGE = 200;
  const MAX_ROWS = 3000; // rows kept on the page; older ones are paged back

  function filters() {
    return {
      kind: $('#filter-kind').value,
      verdict: $('#filter-verdict').value,
      pid: $('#filter-pid').value.trim(),
      q: $('#filter-text').value.trim(),
      all: $('#show-all').checked,
    };
  }

  function eventsQuery(f, extra) {
    const p = new URLSearchParams();
    p.set('limit', String(PAGE));
    if (f.kind) p.set('kind', f.kind === 'file' ? 'file,file_reads' : f.kind);
    if (f.verdict) p.set('verdict', f.verdict);
    if (/^\d+$/.test(f.pid)) p.set('pid', f.pid);
    if (f.q) p.set('q', f.q);
    if (f.all) p.set('all', '1');
    for (const [k, v] of Object.entries(extra || {})) p.set(k, String(v));
    return p.toString();
  }

  // matches applies the filters to a live record as the server applies
  // them to a page.
  function matches(f, e) {
    if (f.kind) {
      const k = f.kind === 'file' ? ['file', 'file_reads'] : [f.kind];
      if (!k.includes(e.kind)) return false;
    }
    if (f.verdict && e.verdict !== f.verdict) return false;
    if (/^\d+$/.test(f.pid)) {
      const pid = Number(f.pid);
      if (e.pid !== pid && !(e.process && e.process.pid === pid)) return false;
    }
    if (f.q && !JSON.stringify(e).toLowerCase().includes(f.q.toLowerCase())) return false;
    return true;
  }

  function openSession(id) {
    const old = state.view;
    if (old && old.id === id) return;
    if (old) old.close();
    $('#list-view').hidden = true;
    $('#session').hidden = false;
    const v = {
      id,
      summary: state.sessions.get(id) || null,
      tree: null,
      folded: new Map(), // pid → folded, as toggled
      pids: new Set(), // the pids in the tree shown
      liveFold: null, // the folded line live routine reads go to
      loaded: false,
      loading: 0, // generation of the page being loaded
      gen: 0,
      firstSeq: 0,
      lastSeq: 0,
      total: 0,
      more: false,
      buffer: [],
      rows: 0,
      closed: false,
    };
    v.refreshTree = throttle(() => loadSession(v), 1500);
    v.refreshTimeline = throttle(() => loadTimeline(v), 1500);
    v.close = () => { v.closed = true; };
    state.view = v;
    renderCrumbs(v);
    renderHead(v);
    clear($('#tree'));
    clear($('#timeline'));
    clear($('#events'));
    openStream(id);
    loadSession(v);
    loadTimeline(v);
    loadEvents(v);
  }

  function showList() {
    if (state.view) state.view.close();
    state.view = null;
    $('#session').hidden = true;
    $('#list-view').hidden = false;
    renderCrumbs(null);
    if (!stream || stream.url.includes('?')) openStream('');
    renderSessions();
  }

  function renderCrumbs(v) {
    const c = $('#crumbs');
    clear(c);
    add(c, el('a', { href: '#/', text: 'sessions' }));
    if (v) add(c, [el('span', { class: 'sep', text: '›' }), el('span', { class: 'mono', text: shortID(v.id), title: v.id })]);
  }

  async function loadSession(v) {
    try {
      const body = await api(`/api/sessions/${encodeURIComponent(v.id)}`);
      if (v.closed) return;
      v.summary = body.session;
      state.sessions.set(body.session.id, body.session);
      for (const q of body.questions || []) state.questions.set(q.id, q);
      renderQuestions();
      v.tree = body.tree || [];
      renderHead(v);
      renderTree(v);
    } catch (e) {
      if (v.closed || e.status === 401) return;
      if (e.status === 404) {
        clear($('#session-head'));
        add($('#session-head'), el('h1', { text: `No session ${v.id} in the audit log` }));
        return;
      }
      notice(`session: ${e.message}`, 'error');
    }
  }

  function stat(label, value, cls) {
    return el('div', { class: `stat ${cls || ''}` }, el('div', { class: 'stat-v', text: value }), el('div', { class: 'stat-l', text: label }));
  }

  function renderHead(v) {
    const h = $('#session-head');
    const s = v.summary;
    clear(h);
    if (!s) {
      add(h, el('h1', { class: 'mono', text: `session ${v.id}` }));
      return;
    }
    const running = !!s.running;
    add(h, [
      el('div', { class: 'title' },
        el('h1', {}, el('span', { text: s.agent || base((s.command || [])[0]) || 'session' }), ' ',
          el('span', { class: 'mono muted', text: s.id })),
        el('span', { class: `state ${running ? 'running' : 'ended'}`, text: running ? 'running' : 'ended' })),
      el('div', { class: 'meta mono' },
        (s.command || []).length ? el('div', {}, el('span', { class: 'k', text: 'command ' }), (s.command || []).join(' ')) : null,
        el('div', {},
          el('span', { class: 'k', text: 'mode ' }), s.mode || '?',
          el('span', { class: 'k', text: '  user ' }), s.agent_uid === undefined || s.agent_uid === null ? '?' : `uid ${s.agent_uid}`,
          el('span', { class: 'k', text: '  started ' }), `${fmtDate(s.start)} UTC`,
          s.end ? [el('span', { class: 'k', text: '  ended ' }), `${fmtDate(s.end)} UTC`] : null,
          s.exit_code !== undefined && s.exit_code !== null ? [el('span', { class: 'k', text: '  exit ' }), String(s.exit_code)] : null)),
      el('div', { class: 'stats' },
        stat('duration', fmtDuration(sessionDuration(s))),
        stat('events', fmtCount(s.events)),
        stat('requests', fmtCount(s.requests)),
        stat('denials', fmtCount(s.denials), s.denials ? 'deny' : ''),
        stat('redactions', fmtCount(s.redactions)),
        stat('LLM calls', fmtCount(s.llm_calls)),
        stat('tokens', fmtCount(s.tokens))),
    ]);
  }

  // ---------------------------------------------------------------- process tree

  function renderTree(v) {
    v.treeStale = pressed === '#tree';
    if (v.treeStale) return; // again on release
    const box = $('#tree');
    const ul = el('ul', { class: 'tree-root' });
    v.pids = new Set();
    const collect = (n) => {
      v.pids.add(n.pid);
      for (const k of n.children || []) collect(k);
    };
    for (const n of v.tree || []) collect(n);
    const walk = (n, depth) => {
      const kids = n.children || [];
      // Deep subtrees start folded; a toggle is remembered across updates.
      const folded = kids.length > 0 && (v.folded.has(n.pid) ? v.folded.get(n.pid) : depth >= 3);
      const li = el('li', { 'data-pid': n.pid, class: folded ? 'node folded' : 'node' });
      const names = (n.names || []).join(' → ') || (n.pid === 0 ? '(no process)' : '?');
      const toggle = kids.length
        ? el('button', {
          type: 'button', class: 'toggle', title: folded ? 'unfold' : 'fold', 'aria-expanded': String(!folded), text: folded ? '▸' : '▾',
          onclick: (ev) => {
            ev.stopPropagation();
            v.folded.set(n.pid, !folded);
            renderTree(v);
          },
        })
        : el('span', { class: 'toggle-pad' });
      const label = el('div', {
        class: 'proc',
        title: n.pid ? `show the events of pid ${n.pid}` : 'show the events of no process',
        onclick: () => {
          $('#filter-pid').value = n.pid ? String(n.pid) : '';
          reloadEvents();
        },
      },
      toggle,
      el('span', { class: 'pname', text: names }),
      n.pid ? el('span', { class: 'pid mono', text: `[${n.pid}]` }) : null,
      el('span', { class: 'count', text: String(n.actions || 0), title: 'actions' }),
      n.denials ? el('span', { class: 'count deny', text: `${n.denials} denied` }) : null);
      add(li, label);
      if ((n.argv || []).length) add(li, el('div', { class: 'argv mono', text: n.argv.join(' '), title: n.argv.join(' ') }));
      if (kids.length && !folded) {
        const sub = el('ul');
        for (const k of kids) add(sub, walk(k, depth + 1));
        add(li, sub);
      }
      return li;
    };
    for (const n of v.tree || []) add(ul, walk(n, 0));
    box.replaceChildren(ul);
    if (!(v.tree || []).length) box.replaceChildren(el('p', { class: 'muted', text: 'No process has acted yet.' }));
  }

  // ---------------------------------------------------------------- timeline

  const KIND_ORDER = ['session_start', 'connect', 'tls', 'http', 'ws', 'llm', 'dns', 'file', 'file_reads', 'exec', 'policy_reload', 'session_end'];
  const VERDICT_ORDER = ['deny', 'ask', 'rewrite', 'allow'];

  async function loadTimeline(v) {
    try {
      const tl = await api(`/api/sessions/${encodeURIComponent(v.id)}/timeline?buckets=60`);
      if (v.closed) return;
      v.timeline = tl;
      drawTimeline(v);
    } catch (e) {
      if (!v.closed && e.status !== 401) notice(`timeline: ${e.message}`, 'error');
    }
  }

  // drawTimeline draws one lane per kind, a bar per bucket stacked by
  // verdict. The chart stretches to its box (the SVG's x axis is the
  // buckets, scaled by the browser; nothing in it is text), so it never
  // needs drawing again for a new width.
  function drawTimeline(v) {
    const tl = v.timeline;
    const chart = $('#timeline');
    const labels = $('#timeline-labels');
    clear(chart);
    clear(labels);
    const series = (tl.series || []).filter((s) => (s.counts || []).some((c) => c > 0));
    const kinds = [...new Set(series.map((s) => s.kind))].sort((a, b) => {
      const ia = KIND_ORDER.indexOf(a);
      const ib = KIND_ORDER.indexOf(b);
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || (a < b ? -1 : 1);
    });
    const n = Math.max(0, ...series.map((s) => (s.counts || []).length));
    const laneH = 22;
    const H = Math.max(1, kinds.length) * laneH;
    chart.setAttribute('viewBox', `0 0 ${Math.max(1, n)} ${H}`);
    chart.setAttribute('height', String(H));
    $('#timeline-range').textContent = tl.start ? `${fmtDuration(tl.bucket_ms)} a bar` : '';
    $('#timeline-start').textContent = tl.start ? `${fmtClock(tl.start)} UTC` : '';
    $('#timeline-end').textContent = tl.end ? `${fmtClock(tl.end)} UTC` : '';
    if (!kinds.length || !n) {
      add(labels, el('div', { class: 'tl-label muted', text: 'no events yet' }));
      return;
    }
    const start = parseTime(tl.start);
    kinds.forEach((kind, i) => {
      const y0 = i * laneH;
      const lane = series.filter((s) => s.kind === kind);
      const totals = new Array(n).fill(0);
      for (const s of lane) (s.counts || []).forEach((c, b) => { totals[b] += c; });
      const max = Math.max(1, ...totals);
      add(labels, el('button', {
        type: 'button', class: 'tl-label', text: kind, title: `show only ${kind} events`,
        onclick: () => { $('#filter-kind').value = KIND_ORDER.includes(kind) && kind !== 'file_reads' ? kind : 'file'; reloadEvents(); },
      }));
      const g = svg('g', { class: 'lane', 'data-kind': kind });
      add(g, svg('rect', { x: 0, y: y0, width: n, height: laneH, class: i % 2 ? 'lane-bg odd' : 'lane-bg' }));
      for (let b = 0; b < n; b++) {
        if (!totals[b]) continue;
        // Bars are scaled within the lane (a lane's busiest moment is
        // full height), at least 2 px so that one event shows.
        let y = y0 + laneH - 2;
        for (const verdict of VERDICT_ORDER) {
          const s = lane.find((x) => x.verdict === verdict);
          const c = s ? (s.counts || [])[b] || 0 : 0;
          if (!c) continue;
          const h = Math.max(2, (c / max) * (laneH - 5));
          y -= h;
          const when = start ? fmtClock(new Date(start.getTime() + b * tl.bucket_ms).toISOString()) : '';
          add(g, svg('rect', { x: b + 0.1, y, width: 0.8, height: h, class: `bar v-${verdict}` },
            svg('title', { text: `${when} ${kind} ${verdict}: ${c}` })));
        }
      }
      add(chart, g);
    });
    const legend = $('#timeline-legend');
    if (!legend.firstChild) {
      for (const verdict of VERDICT_ORDER) {
        add(legend, el('span', { class: 'key' }, el('span', { class: `swatch v-${verdict}` }), verdict));
      }
    }
  }

  // ---------------------------------------------------------------- events

  let textTimer = null;
  function wireFilters() {
    for (const id of ['#filter-kind', '#filter-verdict', '#show-all']) $(id).addEventListener('change', reloadEvents);
    for (const id of ['#filter-pid', '#filter-text']) {
      $(id).addEventListener('input', () => {
        clearTimeout(textTimer);
        textTimer = setTimeout(reloadEvents, 250);
      });
    }
    $('#filters').addEventListener('submit', (e) => { e.preventDefault(); reloadEvents(); });
    $('#filter-clear').addEventListener('click', () => {
      $('#filter-kind').value = '';
      $('#filter-verdict').value = '';
      $('#filter-pid').value = '';
      $('#filter-text').value = '';
      $('#show-all').checked = false;
      reloadEvents();
    });
    $('#older').addEventListener('click', () => { if (state.view) loadOlder(state.view); });
  }

  function reloadEvents() {
    const v = state.view;
    if (!v) return;
    clear($('#events'));
    v.firstSeq = v.lastSeq = v.total = v.rows = 0;
    v.loaded = false;
    loadEvents(v);
  }

  async function loadEvents(v) {
    const gen = ++v.gen;
    const f = filters();
    v.f = f;
    const t0 = performance.now();
    try {
      const body = await api(`/api/sessions/${encodeURIComponent(v.id)}/events?${eventsQuery(f)}`);
      if (v.closed || gen !== v.gen) return;
      const evs = body.events || [];
      v.total = body.total || 0;
      v.more = !!body.more;
      v.firstSeq = evs.length ? evs[0].seq : 0;
      v.lastSeq = evs.length ? lastSeqOf(evs[evs.length - 1]) : 0;
      v.liveFold = null;
      const box = $('#events');
      box.replaceChildren(...evs.map((e) => eventRow(e, f)));
      v.rows = evs.length;
      v.loaded = true;
      // Live records that came while the page loaded.
      const buffered = v.buffer;
      v.buffer = [];
      for (const e of buffered) appendLive(v, e);
      updateEventsMeta(v);
      scrollToEnd();
      document.body.dataset.eventsLoadedMs = String(Math.round(performance.now() - t0));
    } catch (e) {
      if (!v.closed && e.status !== 401) notice(`events: ${e.message}`, 'error');
    }
  }

  async function loadOlder(v) {
    if (!v.more || !v.firstSeq) return;
    const f = v.f;
    const gen = v.gen;
    const wrap = $('#events-wrap');
    try {
      const body = await api(`/api/sessions/${encodeURIComponent(v.id)}/events?${eventsQuery(f, { before: v.firstSeq })}`);
      if (v.closed || gen !== v.gen) return;
      const evs = body.events || [];
      if (!evs.length) {
        v.more = false;
        updateEventsMeta(v);
        return;
      }
      const h = wrap.scrollHeight;
      $('#events').prepend(...evs.map((e) => eventRow(e, f)));
      v.rows += evs.length;
      v.firstSeq = evs[0].seq;
      v.more = !!body.more;
      wrap.scrollTop += wrap.scrollHeight - h; // keep what was in view
      updateEventsMeta(v);
    } catch (e) {
      if (!v.closed && e.status !== 401) notice(`events: ${e.message}`, 'error');
    }
  }

  // fetchNewer catches up after the stream reconnected.
  async function fetchNewer(v) {
    const f = v.f;
    const gen = v.gen;
    try {
      const body = await api(`/api/sessions/${encodeURIComponent(v.id)}/events?${eventsQuery(f, { after: v.lastSeq })}`);
      if (v.closed || gen !== v.gen) return;
      for (const e of body.events || []) appendLive(v, e);
    } catch (e) {
      // the stream's own records will do
    }
  }

  function onRecord(e) {
    const v = state.view;
    if (!v || e.session !== v.id) return;
    v.refreshTimeline();
    const pid = e.pid || (e.process && e.process.pid) || 0;
    if (e.kind === 'process' || e.kind === 'session_end' || (pid && !v.pids.has(pid))) v.refreshTree();
    if (!v.loaded) {
      v.buffer.push(e);
      return;
    }
    appendLive(v, e);
  }

  // lastSeq is the last record a line stands for (a folded line, several).
  const lastSeqOf = (e) => e.last_seq || e.seq;

  function appendLive(v, e) {
    if (e.kind === 'process') return;
    if (!matches(v.f, e) || e.seq <= v.lastSeq) return;
    const wrap = $('#events-wrap');
    const atEnd = wrap.scrollHeight - wrap.scrollTop - wrap.clientHeight < 40;
    v.lastSeq = lastSeqOf(e);
    if (e.routine && e.kind === 'file' && !v.f.all) {
      foldLive(v, e); // as a page folds it: one line for a run of one process's routine reads
    } else {
      v.liveFold = null;
      $('#events').append(eventRow(e, v.f));
      v.rows++;
      v.total++;
    }
    if (!v.firstSeq) v.firstSeq = e.seq;
    const box = $('#events');
    while (v.rows > MAX_ROWS && box.firstChild) {
      box.firstChild.remove();
      v.rows--;
      v.more = true;
      v.firstSeq = Number(box.firstChild && box.firstChild.dataset.seq) || v.firstSeq;
    }
    updateEventsMeta(v);
    if (atEnd) scrollToEnd();
  }

  // foldLive adds a routine read that came live to the folded line it
  // continues (the last line, of the same process), or starts one.
  function foldLive(v, e) {
    const box = $('#events');
    const pid = e.pid || (e.process && e.process.pid) || 0;
    let lf = v.liveFold;
    if (!lf || lf.pid !== pid || box.lastChild !== lf.row) {
      lf = { pid, first: e, count: 0, dirs: new Map(), row: null };
      v.liveFold = lf;
    }
    lf.count++;
    const path = e.path || '';
    const cut = path.lastIndexOf('/');
    const dir = cut > 0 ? path.slice(0, cut) : '/';
    let d = lf.dirs.get(dir);
    if (!d) {
      d = { dir, count: 0, files: new Set() };
      lf.dirs.set(dir, d);
    }
    d.count++;
    d.files.add(path.slice(cut + 1));
    const row = foldedRow({
      seq: lf.first.seq, last_seq: e.seq, kind: 'file_reads', verdict: 'allow', time: lf.first.time, pid, process: lf.first.process, count: lf.count,
      reads: [...lf.dirs.values()].map((x) => ({ dir: x.dir, count: x.count, files: [...x.files] })),
    });
    if (lf.row) {
      lf.row.replaceWith(row);
    } else {
      box.append(row);
      v.rows++;
      v.total++;
    }
    lf.row = row;
  }

  function scrollToEnd() {
    const wrap = $('#events-wrap');
    wrap.scrollTop = wrap.scrollHeight;
  }

  function updateEventsMeta(v) {
    $('#older').hidden = !v.more;
    $('#events-count').textContent = `${v.rows} shown of ${v.total}`;
    if (!v.rows) {
      const box = $('#events');
      if (!box.querySelector('.none')) box.replaceChildren(el('p', { class: 'none muted', text: 'No events match.' }));
    } else {
      const none = $('#events .none');
      if (none) none.remove();
    }
  }

  // ---------------------------------------------------------------- one event

  function eventRow(e, f) {
    if (e.kind === 'file_reads' && !(f && f.all)) return foldedRow(e);
    const row = el('div', {
      class: 'event',
      'data-seq': e.seq,
      'data-kind': e.kind,
      'data-verdict': e.verdict || '',
    });
    if (e.tool && e.tool.id) row.setAttribute('data-tool-id', e.tool.id);
    const p = e.process;
    const pid = e.pid || (p && p.pid) || 0;
    add(row, el('div', { class: 'line' },
      el('span', { class: 'time mono', text: fmtClock(e.time), title: e.time || '' }),
      el('span', { class: 'kind', text: e.kind }),
      el('span', { class: `verdict v-${e.verdict || 'none'}`, text: e.verdict || '' }),
      el('span', { class: 'what mono' }, what(e)),
      pid ? el('span', {
        class: 'who mono',
        text: `${procName(p) || 'pid'}[${pid}]`,
        title: p && p.argv ? p.argv.join(' ') : `pid ${pid}`,
        onclick: () => { $('#filter-pid').value = String(pid); reloadEvents(); },
      }) : null));
    if (e.tool && e.tool.id) {
      add(row, el('div', { class: 'caused mono' }, '↳ from tool call ', el('span', { class: 'tool-name', text: e.tool.name || '' }), ' ',
        el('span', { class: 'muted', text: e.tool.id }), e.tool.match ? el('span', { class: 'muted', text: ` (${e.tool.match})` }) : null));
    }
    if (e.kind === 'llm') add(row, llmBlock(e));
    if (e.kind === 'file_reads') add(row, readsBlock(e));
    const details = detailLines(e);
    if (details.length) add(row, el('div', { class: 'details mono' }, details));
    if (e.verdict && e.verdict !== 'allow' && (e.rule || e.reason || e.decided_by)) {
      add(row, el('div', { class: 'reason' },
        e.rule ? el('span', { class: 'rule mono', text: e.rule }) : el('span', { class: 'rule mono', text: e.decided_by === 'judge' ? 'judge' : (e.decided_by || '') }),
        e.decided_by ? el('span', { class: 'by', text: ` by ${e.decided_by}` }) : null,
        e.reason ? el('span', { class: 'text', text: `: ${e.reason}` }) : null));
    }
    if (e.verdict === 'deny' && p) {
      add(row, el('div', { class: 'lineage mono', title: 'the process lineage, the session\'s root first' },
        el('span', { class: 'k', text: 'lineage ' }),
        (p.lineage && p.lineage.length ? p.lineage : [procName(p)]).join(' › '),
        ` [${p.pid}]`,
        p.argv && p.argv.length ? el('span', { class: 'muted', text: `  ${p.argv.join(' ')}` }) : null));
    }
    return row;
  }

  function what(e) {
    switch (e.kind) {
      case 'connect':
        return [e.host ? `${e.host}:${e.port || ''}` : e.dst || '', e.dst && e.host ? el('span', { class: 'muted', text: ` (${e.dst})` }) : null,
          e.transport && e.transport !== 'tcp' ? el('span', { class: 'muted', text: ` ${e.transport}` }) : null];
      case 'tls':
        return [e.sni || e.host || '', el('span', { class: 'muted', text: ` ${[e.tls_version, (e.alpn || []).join(','), e.intercepted ? 'intercepted' : ''].filter(Boolean).join(' ')}` })];
      case 'http':
        return [`${e.method || ''} ${e.url || e.host || ''}`, e.status ? el('span', { class: 'status', text: ` → ${e.status}` }) : null,
          e.error ? el('span', { class: 'deny-text', text: ` ${e.error}` }) : null];
      case 'llm':
        return [`${e.provider || ''} ${e.model || ''}`, e.operation ? el('span', { class: 'muted', text: ` ${e.operation}` }) : null];
      case 'ws':
        return [`${e.direction || ''} ${e.opcode || ''} ${e.host || ''}${e.path || ''}`,
          el('span', { class: 'muted', text: ` ${e.size >= 0 ? `${e.size} B` : 'streamed'}${e.mcp_method ? ` ${e.mcp_method} ${e.mcp_tool || ''}` : ''}` })];
      case 'dns':
        return [`${e.name || ''} ${e.qtype || ''}`, (e.answers || []).length ? el('span', { class: 'muted', text: ` → ${e.answers.join(', ')}` }) : null,
          e.rcode && e.rcode !== 'NOERROR' ? el('span', { class: 'muted', text: ` ${e.rcode}` }) : null];
      case 'file':
        return [`${e.op || e.access || ''} ${e.path || ''}`, e.target ? ` → ${e.target}` : null];
      case 'file_reads':
        return `${e.count || 0} routine reads`;
      case 'exec':
        return (e.argv && e.argv.length ? e.argv.join(' ') : e.path) || '';
      case 'session_start':
        return `session started: ${(e.command || []).join(' ')}${e.mode ? ` (${e.mode})` : ''}`;
      case 'session_end':
        return `session ended${e.exit_code !== undefined && e.exit_code !== null ? `, exit code ${e.exit_code}` : ''}${e.duration_ms ? ` after ${fmtDuration(e.duration_ms)}` : ''}`;
      case 'policy_reload':
        return `policy ${e.trigger || 'reload'} ${e.path || ''}${e.error ? `: ${e.error}` : ''}`;
      default:
        return e.path || e.url || e.host || '';
    }
  }

  function detailLines(e) {
    const out = [];
    const line = (k, ...v) => out.push(el('div', {}, el('span', { class: 'k', text: `${k} ` }), v));
    if (e.kind === 'exec' && e.path && e.argv && e.argv.length) line('path', e.path);
    if (e.kind === 'exec' && e.interpreter) line('interpreter', e.interpreter);
    if (e.rewrite) {
      const r = e.rewrite;
      const red = Object.entries(r.redacted || {}).map(([rule, n]) => `${rule} ×${n}`);
      if (red.length) line('secrets redacted', red.join(', '));
      if ((r.credentials || []).length) line('credentials injected', r.credentials.join(', '));
      if ((r.headers || []).length) line('headers set', r.headers.join(', '));
    }
    if ((e.kind === 'http' || e.kind === 'ws') && (e.secrets || []).length && !e.rewrite) line('secrets found', e.secrets.join(', '));
    if (e.kind === 'ws' && e.text) line('text', e.text + (e.text_truncated ? ' …' : ''));
    if (e.truncated) line('note', 'long values were shortened in the log');
    return out;
  }

  function llmBlock(e) {
    const tokens = `${e.input_tokens || 0} in / ${e.output_tokens || 0} out`;
    const box = el('div', { class: 'llm' },
      el('div', { class: 'llm-meta' },
        kv('provider', e.provider || '?'),
        kv('model', e.response_model && e.response_model !== e.model ? `${e.model || ''} (${e.response_model})` : e.model || '?'),
        kv('tokens', tokens),
        e.latency_ms !== undefined && e.latency_ms !== null ? kv('latency', fmtDuration(e.latency_ms)) : null,
        e.status ? kv('status', String(e.status)) : null,
        e.restored ? kv('restored', `${e.restored} placeholder${e.restored === 1 ? '' : 's'} in the answer`) : null,
        (e.finish_reasons || []).length ? kv('finish', e.finish_reasons.join(', ')) : null));
    if (e.prompt) {
      add(box, el('div', { class: 'prompt-label', text: `last user turn${e.prompt_truncated ? ' (cut)' : ''}` }),
        el('pre', { class: 'prompt' }, withPlaceholders(e.prompt)));
    }
    const calls = e.tool_calls || [];
    if (calls.length) {
      const tools = el('ul', { class: 'tools' });
      for (const c of calls) {
        const a = el('a', {
          href: '#', 'data-tool': c.id || '', title: 'show the actions this tool call caused',
          onclick: (ev) => {
            ev.preventDefault();
            showToolRows(c.id, a);
          },
        }, el('span', { class: 'tool-name' }, withPlaceholders(c.name || '?')), c.id ? el('span', { class: 'muted', text: ` ${c.id}` }) : null);
        add(tools, el('li', {}, a, el('span', { class: 'tool-note muted' })));
      }
      add(box, el('div', { class: 'prompt-label', text: 'tool calls' }), tools);
    }
    return box;
  }

  function kv(k, v) {
    return el('span', { class: 'kv' }, el('span', { class: 'k', text: `${k} ` }), el('span', { class: 'v mono', text: v }));
  }

  // showToolRows highlights the rows a tool call caused and brings the
  // first into view.
  function showToolRows(id, link) {
    const rows = [...document.querySelectorAll('#events .event[data-tool-id]')].filter((r) => r.getAttribute('data-tool-id') === id);
    for (const r of document.querySelectorAll('#events .event.hl')) r.classList.remove('hl');
    for (const r of rows) r.classList.add('hl');
    const note = link.parentElement.querySelector('.tool-note');
    if (note) note.textContent = rows.length ? ` ${rows.length} action${rows.length === 1 ? '' : 's'}` : ' no action of it on this page';
    if (rows.length) { // within the events' box: the page itself stays
      const wrap = $('#events-wrap');
      wrap.scrollTop = Math.max(0, rows[0].offsetTop - wrap.clientHeight / 3);
    }
  }

  function readsBlock(e) {
    const ul = el('ul', { class: 'reads mono' });
    for (const d of e.reads || []) {
      add(ul, el('li', {}, el('span', { class: 'dir', text: d.dir }), el('span', { class: 'muted', text: ` ${d.count} read${d.count === 1 ? '' : 's'}${d.rule ? `, rule ${d.rule}` : ''}` }),
        (d.files || []).length ? el('ul', {}, d.files.map((f) => el('li', { text: f }))) : null));
    }
    return ul;
  }

  // foldedRow is a file_reads record as one counted line: routine reads
  // (shared libraries, locale, the agent's own caches) are noise unless
  // asked for with #show-all.
  function foldedRow(e) {
    const dirs = (e.reads || []).map((d) => d.dir);
    const files = (e.reads || []).reduce((n, d) => n + ((d.files || []).length || 0), 0);
    const pid = e.pid || (e.process && e.process.pid) || 0;
    return el('div', { class: 'event folded', 'data-seq': e.seq, 'data-last-seq': e.last_seq, 'data-kind': e.kind, 'data-verdict': e.verdict || '' },
      el('div', { class: 'line' },
        el('span', { class: 'time mono', text: fmtClock(e.time) }),
        el('span', { class: 'kind', text: 'reads' }),
        el('span', { class: 'verdict v-allow', text: e.verdict || '' }),
        el('span', { class: 'what' },
          el('span', { class: 'count-n', text: String(e.count || 0) }),
          ` routine read${e.count === 1 ? '' : 's'}${files ? ` of ${files} file${files === 1 ? '' : 's'}` : ''} in `,
          el('span', { class: 'mono', text: dirs.slice(0, 3).join(', ') + (dirs.length > 3 ? `, +${dirs.length - 3} more` : '') }),
          ' ', el('button', { type: 'button', class: 'link', text: 'show', onclick: () => { $('#show-all').checked = true; reloadEvents(); } })),
        pid ? el('span', { class: 'who mono', text: `${procName(e.process) || 'pid'}[${pid}]` }) : null));
  }

  // ---------------------------------------------------------------- routes

  function route() {
    const m = /^#\/s\/([^/]+)$/.exec(location.hash);
    if (m) {
      let id;
      try {
        id = decodeURIComponent(m[1]);
      } catch (e) {
        id = m[1];
      }
      openSession(id);
    } else {
      showList();
    }
  }

  function start() {
    wireFilters();
    window.addEventListener('hashchange', route);
    route();
    if (!stream) openStream('');
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
