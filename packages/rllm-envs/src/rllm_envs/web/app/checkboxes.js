const boxes = TASK.options.map((name) =>
  [name, el("input", {type: "checkbox", "aria-label": name, checked: TASK.checked.includes(name)})]);
mount(el("h1", {}, "Fruit order"), form(() => finish({
  checked: boxes.filter(([, box]) => box.checked).map(([name]) => name).sort()}),
  el("fieldset", {}, el("legend", {}, "Fruits"), boxes.map(([name, box]) => el("label", {}, box, " " + name))),
  el("button", {type: "submit"}, "Submit")));
