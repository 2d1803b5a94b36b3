const input = el("input", {type: "text", role: "combobox", "aria-label": "Home city",
  "aria-autocomplete": "list", "aria-expanded": "false", autocomplete: "off"});
const list = el("ul", {role: "listbox", "aria-label": "Suggestions"});
function suggest() {
  const prefix = input.value.trim().toLowerCase();
  const matches = prefix ? TASK.cities.filter((c) => c.toLowerCase().startsWith(prefix)).slice(0, 8) : [];
  list.replaceChildren(...matches.map((city) => el("li", {role: "option", "aria-selected": "false",
    onclick: () => { input.value = city; list.replaceChildren(); input.setAttribute("aria-expanded", "false"); }}, city)));
  input.setAttribute("aria-expanded", String(matches.length > 0));
}
input.addEventListener("input", suggest);
mount(el("h1", {}, "Your profile"), form(() => finish({city: input.value}),
  field("Home city", input), list, el("button", {type: "submit"}, "Submit")));
