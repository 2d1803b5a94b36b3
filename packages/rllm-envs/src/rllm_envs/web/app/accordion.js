const openSections = new Set();
function render() {
  mount(el("h1", {}, "Help centre"), Object.entries(TASK.codes).map(([section, code]) => {
    const expanded = openSections.has(section);
    return el("section", {}, el("h2", {}, el("button", {type: "button", class: "plain",
      "aria-expanded": String(expanded), onclick: () => {
        if (expanded) openSections.delete(section); else openSections.add(section);
        render();
      }}, section)),
      expanded ? el("p", {}, `The access code for ${section} is ${code}.`) : null);
  }));
}
render();
