const COLUMNS = ["Name", "Department", "City", "Age", "Salary"];
mount(el("h1", {}, "Staff directory"), el("table", {},
  el("thead", {}, el("tr", {}, COLUMNS.map((c) => el("th", {}, c)))),
  el("tbody", {}, TASK.rows.map((row) => el("tr", {}, COLUMNS.map((c) => el("td", {}, String(row[c]))))))));
