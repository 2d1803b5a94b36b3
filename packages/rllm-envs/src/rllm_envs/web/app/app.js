"use strict";
// Shared helpers of the task pages. TASK is the instance's public data: inlined by the server
// in a page it renders, or handed to `start` when a reset turns a warm spare page into the task.
let TASK = null;
let FAMILY = "";
let SUBPATH = [];

function start(task) {
  TASK = task;
  const parts = location.pathname.split("/").filter(Boolean);
  FAMILY = parts[0] || "";
  SUBPATH = parts.slice(1).map(decodeURIComponent);
}

// What a reset runs in the spare page: the task's address, title, data and family script.
function boot(path, title, task, script) {
  history.replaceState(null, "", path);
  document.title = title;
  start(task);
  const node = document.createElement("script");
  node.textContent = script;
  document.body.append(node);
}

function el(tag, props, ...kids) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === false || value == null) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "value") node.value = value;
    else if (key === "checked") node.checked = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const kid of kids.flat()) if (kid != null && kid !== false) node.append(kid);
  return node;
}

function mount(...nodes) { document.getElementById("app").replaceChildren(...nodes.flat().filter((n) => n != null)); }

// Synchronous on purpose: the state is on the server before the click that caused it returns.
function report(state) {
  const request = new XMLHttpRequest();
  request.open("POST", "/api/state", false);
  request.setRequestHeader("Content-Type", "application/json");
  request.send(JSON.stringify(state));
}

function finish(state, message) {
  report(Object.assign({}, state, {done: true}));
  mount(el("h1", {}, message || "Thank you!"), el("p", {}, "Your submission was recorded."));
}

function form(onSubmit, ...kids) {
  return el("form", {onsubmit: (event) => { event.preventDefault(); onSubmit(); }}, ...kids);
}

function field(labelText, input) { return el("label", {}, labelText + " ", input); }

function href(...parts) { return "/" + [FAMILY, ...parts].map(encodeURIComponent).join("/"); }

// Cross-page state of one episode (each episode has a fresh browser context).
function stored(key, fallback) {
  const raw = sessionStorage.getItem(key);
  return raw == null ? fallback : JSON.parse(raw);
}
function store(key, value) { sessionStorage.setItem(key, JSON.stringify(value)); }
