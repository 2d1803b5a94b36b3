const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
  "September", "October", "November", "December"];
let year = TASK.year, month = TASK.month, chosen = null, open = false;
const pad = (n) => String(n).padStart(2, "0");
function render() {
  const input = el("input", {type: "text", readonly: true, "aria-label": "Date", value: chosen || ""});
  const parts = [el("h1", {}, "Book a table"), field("Date", input),
    el("button", {type: "button", class: "plain", onclick: () => { open = !open; render(); }}, "Choose date")];
  if (open) {
    const days = new Date(year, month, 0).getDate();
    const grid = [];
    for (let day = 1; day <= days; day++) {
      const label = `${day} ${MONTHS[month - 1]} ${year}`;
      grid.push(el("button", {type: "button", class: "plain", "aria-label": label, onclick: () => {
        chosen = `${year}-${pad(month)}-${pad(day)}`; open = false; render();
      }}, String(day)));
    }
    const shift = (delta) => () => { month += delta; if (month < 1) { month = 12; year -= 1; }
      if (month > 12) { month = 1; year += 1; } render(); };
    parts.push(el("div", {class: "calendar", role: "group", "aria-label": "Calendar"},
      el("h2", {}, `${MONTHS[month - 1]} ${year}`),
      el("button", {type: "button", onclick: shift(-1)}, "Previous month"),
      el("button", {type: "button", onclick: shift(1)}, "Next month"), el("div", {}, grid)));
  }
  parts.push(el("div", {}, el("button", {type: "button", onclick: () => finish({date: chosen})}, "Confirm date")));
  mount(...parts);
}
render();
