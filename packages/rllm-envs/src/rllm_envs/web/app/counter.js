let guests = TASK.start;
const count = el("strong", {"aria-live": "polite"}, String(guests));
const change = (delta) => () => { guests = Math.max(0, Math.min(20, guests + delta)); count.textContent = String(guests); };
mount(el("h1", {}, "Dinner booking"), el("p", {}, "Guests: ", count),
  el("button", {type: "button", class: "plain", onclick: change(-1)}, "Remove guest"),
  el("button", {type: "button", class: "plain", onclick: change(1)}, "Add guest"),
  el("div", {}, el("button", {type: "button", onclick: () => finish({guests})}, "Confirm booking")));
