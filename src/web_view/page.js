// The page of `yy computer attach --web`: fetches frames one at a time and, under
// control, sends clicks, scrolls and keys with the control fence and the id of the frame
// on screen. The CLI relays both through the control plane.
'use strict';

// Frames pause while the person points or types, so that the frame they act on stays
// the latest one (the guest refuses input aimed at an older frame).
const QUIET_MS = 800;
const FRAME_GAP_MS = 100;

const img = document.getElementById('screen');
const box = document.getElementById('screenbox');
const statusEl = document.getElementById('status');
const refusalEl = document.getElementById('refusal');
const frameEl = document.getElementById('frame');

let state = { control: false, fence: null };
let frameId = '';
let frameUrl = null;
let fetching = false;
let lastActivity = 0;
let queue = [];
let sending = false;
let clickTimer = null;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const say = (text) => { statusEl.textContent = text; };

async function errorOf(r) {
  try { return (await r.json()).error || ('HTTP ' + r.status); } catch (_) { return 'HTTP ' + r.status; }
}

// One frame request at a time; the frame id changes only once its image is shown.
async function fetchFrame() {
  if (fetching) return;
  fetching = true;
  try {
    const r = await fetch('/frame', { cache: 'no-store' });
    if (!r.ok) { say('no frame: ' + await errorOf(r)); await sleep(1000); return; }
    const id = r.headers.get('x-frame-id') || '';
    const url = URL.createObjectURL(await r.blob());
    await new Promise((ok, bad) => { img.onload = ok; img.onerror = bad; img.src = url; });
    if (frameUrl) URL.revokeObjectURL(frameUrl);
    frameUrl = url;
    frameId = id;
    frameEl.textContent = id;
    img.dataset.frame = id;
  } catch (e) {
    say('no frame: ' + e);
    await sleep(1000);
  } finally {
    fetching = false;
  }
}

async function frames() {
  for (;;) {
    if (sending || Date.now() - lastActivity < QUIET_MS) { await sleep(50); continue; }
    await fetchFrame();
    await sleep(FRAME_GAP_MS);
  }
}

function busy() { lastActivity = Date.now(); }

// Every input goes in order, one at a time, with the fence and the frame on screen.
async function send(action) {
  if (!state.control) return;
  busy();
  queue.push(action);
  if (sending) return;
  sending = true;
  while (queue.length) {
    const a = queue.shift();
    const body = JSON.stringify({ fence: state.fence, frame_id: frameId, action: a });
    let r;
    try {
      r = await fetch('/input', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    } catch (e) {
      r = null;
    }
    if (!r || !r.ok) {
      const why = r ? await errorOf(r) : 'the CLI did not answer';
      refusalEl.textContent = 'refused: ' + why;
      say(a.action + ' refused; showing the current screen');
      queue = [];
      sending = false;
      lastActivity = 0;
      await fetchFrame();
      return;
    }
    const res = await r.json();
    refusalEl.textContent = '';
    say(a.action + ' done; cursor ' + res.x + ',' + res.y);
  }
  sending = false;
  // Show the effect soon.
  lastActivity = Date.now() - QUIET_MS + 150;
}

// Page coordinates to screen pixels (the image may be shown scaled).
function point(ev) {
  const r = img.getBoundingClientRect();
  const w = img.naturalWidth, h = img.naturalHeight;
  const x = Math.round((ev.clientX - r.left) * w / r.width);
  const y = Math.round((ev.clientY - r.top) * h / r.height);
  return { x: Math.max(0, Math.min(w - 1, x)), y: Math.max(0, Math.min(h - 1, y)) };
}

const KEYS = {
  Enter: 'Return', Backspace: 'BackSpace', Tab: 'Tab', Escape: 'Escape', Delete: 'Delete',
  Insert: 'Insert', Home: 'Home', End: 'End', PageUp: 'Page_Up', PageDown: 'Page_Down',
  ArrowLeft: 'Left', ArrowRight: 'Right', ArrowUp: 'Up', ArrowDown: 'Down', ' ': 'space',
};

function keyAction(ev) {
  const named = KEYS[ev.key] || (/^F([1-9]|1[0-2])$/.test(ev.key) ? ev.key : null);
  const mods = [];
  if (ev.ctrlKey) mods.push('ctrl');
  if (ev.altKey) mods.push('alt');
  if (ev.metaKey) mods.push('super');
  if (mods.length) {
    const k = named || (ev.key.length === 1 ? ev.key.toLowerCase() : null);
    return k ? { action: 'hotkey', keys: mods.concat([k]) } : null;
  }
  if (named) return { action: 'press_key', key: named };
  if (ev.key.length === 1) return { action: 'type_text', text: ev.key };
  return null;
}

function wire() {
  img.addEventListener('mousemove', busy);
  img.addEventListener('mousedown', (ev) => { busy(); box.focus(); ev.preventDefault(); });
  img.addEventListener('click', (ev) => {
    const p = point(ev);
    // A second click within the double-click time makes one double_click instead.
    if (clickTimer) { clearTimeout(clickTimer); clickTimer = null; return; }
    clickTimer = setTimeout(() => { clickTimer = null; send({ action: 'left_click', x: p.x, y: p.y }); }, 250);
  });
  img.addEventListener('dblclick', (ev) => {
    if (clickTimer) { clearTimeout(clickTimer); clickTimer = null; }
    const p = point(ev);
    send({ action: 'double_click', x: p.x, y: p.y });
  });
  img.addEventListener('contextmenu', (ev) => {
    ev.preventDefault();
    const p = point(ev);
    send({ action: 'right_click', x: p.x, y: p.y });
  });
  img.addEventListener('wheel', (ev) => {
    ev.preventDefault();
    const p = point(ev);
    const notches = (d) => (d === 0 ? 0 : Math.sign(d) * Math.max(1, Math.round(Math.abs(d) / 100)));
    send({ action: 'scroll', dy: notches(ev.deltaY), dx: notches(ev.deltaX), x: p.x, y: p.y });
  }, { passive: false });
  box.addEventListener('keydown', (ev) => {
    const a = keyAction(ev);
    if (!a) return;
    ev.preventDefault();
    send(a);
  });
  const text = document.getElementById('text');
  const typeIt = () => { if (text.value) { send({ action: 'type_text', text: text.value }); text.value = ''; } };
  document.getElementById('type').addEventListener('click', typeIt);
  text.addEventListener('keydown', (ev) => { busy(); if (ev.key === 'Enter') typeIt(); });
  for (const b of document.querySelectorAll('button[data-key]')) {
    b.addEventListener('click', () => send({ action: 'press_key', key: b.dataset.key }));
  }
}

async function start() {
  const r = await fetch('/state', { cache: 'no-store' });
  if (!r.ok) { say(await errorOf(r)); return; }
  state = await r.json();
  if (state.control) {
    document.body.classList.add('in-control');
    document.getElementById('mode').textContent = 'in control (fence ' + state.fence + ')';
    wire();
  }
  say('live');
  frames();
}

start();
