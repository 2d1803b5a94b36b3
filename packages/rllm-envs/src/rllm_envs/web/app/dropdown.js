const country = el("select", {"aria-label": "Country"},
  el("option", {value: ""}, "Select a country"), TASK.options.map((c) => el("option", {}, c)));
mount(el("h1", {}, "Profile"), form(() => finish({country: country.value}),
  field("Country", country), el("button", {type: "submit"}, "Save")));
