const settings = Object.assign({}, TASK.settings);
function switchFor(name) {
  const button = el("button", {type: "button", role: "switch", "aria-checked": String(settings[name])}, name);
  button.addEventListener("click", () => {
    settings[name] = !settings[name];
    button.setAttribute("aria-checked", String(settings[name]));
  });
  return el("div", {}, button);
}
mount(el("h1", {}, "Settings"), Object.keys(settings).map(switchFor),
  el("button", {type: "button", onclick: () => finish({settings})}, "Save settings"));
