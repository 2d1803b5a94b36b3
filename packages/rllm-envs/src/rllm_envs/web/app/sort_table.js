const COLUMNS = ["Name", "Department", "City", "Age", "Salary"];
let sort = null;
function render() {
  const rows = TASK.rows.slice();
  if (sort) {
    rows.sort((a, b) => (a[sort.column] < b[sort.column] ? -1 : a[sort.column] > b[sort.column] ? 1 : 0));
    if (sort.descending) rows.reverse();
  }
  const header = (column) => {
    const state = sort && sort.column === column ? (sort.descending ? "descending" : "ascending") : "none";
    return el("th", {"aria-sort": state}, el("button", {type: "button", "aria-label": "Sort by " + column, onclick: () => {
      sort = sort && sort.column === column ? {column, descending: !sort.descending} : {column, descending: false};
      render();
    }}, column));
  };
  mount(el("h1", {}, "Staff directory"),
    el("p", {class: "muted"}, sort ? `Sorted by ${sort.column}, ${sort.descending ? "descending" : "ascending"}.` : "Not sorted."),
    el("table", {}, el("thead", {}, el("tr", {}, COLUMNS.map(header))),
      el("tbody", {}, rows.map((row) => el("tr", {}, COLUMNS.map((c) => el("td", {}, String(row[c]))))))),
    el("button", {type: "button", onclick: () => finish({sort})}, "Save view"));
}
render();
