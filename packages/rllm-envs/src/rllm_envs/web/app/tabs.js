const names = Object.keys(TASK.panels);
let current = names[0];
function render() {
  mount(el("h1", {}, "Store information"),
    el("div", {role: "tablist", "aria-label": "Sections"}, names.map((name) => el("button", {
      type: "button", role: "tab", "aria-selected": String(name === current), id: "tab-" + name,
      onclick: () => { current = name; render(); }}, name))),
    el("div", {role: "tabpanel", "aria-labelledby": "tab-" + current}, el("p", {}, TASK.panels[current])));
}
render();
