const todos = TASK.todos.map((text) => ({text, done: false}));
function render() {
  const entry = el("input", {type: "text", "aria-label": "New task"});
  const items = todos.map((todo) => el("li", {}, el("label", {},
    el("input", {type: "checkbox", "aria-label": todo.text, checked: todo.done,
      onchange: (event) => { todo.done = event.target.checked; }}), " " + todo.text)));
  mount(el("h1", {}, "To-do list"), el("ul", {}, items),
    form(() => { if (entry.value.trim()) { todos.push({text: entry.value.trim(), done: false}); render(); } },
      field("New task", entry)),
    el("button", {type: "button", onclick: () => finish({todos})}, "Save list"));
  entry.focus();
}
render();
