const radios = TASK.options.map((name) =>
  [name, el("input", {type: "radio", name: "destination", "aria-label": name})]);
mount(el("h1", {}, "Plan a trip"), form(() => {
  const chosen = radios.find(([, radio]) => radio.checked);
  finish({destination: chosen ? chosen[0] : null});
}, el("fieldset", {}, el("legend", {}, "Destination"), radios.map(([name, radio]) => el("label", {}, radio, " " + name))),
  el("button", {type: "submit"}, "Submit")));
