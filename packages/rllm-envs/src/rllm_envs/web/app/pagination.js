const pages = Math.ceil(TASK.items.length / TASK.per_page);
const page = Math.min(pages, Math.max(1, Number(SUBPATH[0]) || 1));
const shown = TASK.items.slice((page - 1) * TASK.per_page, page * TASK.per_page);
const links = [];
if (page > 1) links.push(el("a", {href: href(page - 1)}, "Previous page"));
for (let n = 1; n <= pages; n++) {
  links.push(n === page ? el("span", {"aria-current": "page"}, `Page ${n}`) : el("a", {href: href(n)}, `Page ${n}`));
}
if (page < pages) links.push(el("a", {href: href(page + 1)}, "Next page"));
mount(el("h1", {}, `Catalogue, page ${page} of ${pages}`), el("table", {},
  el("thead", {}, el("tr", {}, el("th", {}, "Product"), el("th", {}, "SKU"))),
  el("tbody", {}, shown.map((item) => el("tr", {}, el("td", {}, item.name), el("td", {}, item.sku))))),
  el("nav", {"aria-label": "Pages"}, links));
