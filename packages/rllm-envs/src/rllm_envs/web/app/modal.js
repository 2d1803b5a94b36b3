const files = TASK.files.slice();
const deleted = [];
function render(pending) {
  const parts = [el("h1", {}, "My files"), el("ul", {}, files.map((name) => el("li", {}, name + " ",
    el("button", {type: "button", class: "plain", onclick: () => render(name)}, `Delete ${name}`)))),
    el("button", {type: "button", onclick: () => finish({deleted})}, "Done")];
  if (pending) {
    parts.push(el("div", {role: "dialog", "aria-modal": "true", "aria-labelledby": "dialog-title"},
      el("h2", {id: "dialog-title"}, `Delete ${pending}?`), el("p", {}, "This cannot be undone."),
      el("button", {type: "button", class: "plain", onclick: () => render(null)}, "Cancel"),
      el("button", {type: "button", onclick: () => {
        files.splice(files.indexOf(pending), 1); deleted.push(pending); report({deleted}); render(null);
      }}, "Delete")));
  }
  mount(...parts);
}
render(null);
