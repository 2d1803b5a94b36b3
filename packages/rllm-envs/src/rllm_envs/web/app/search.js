const query = new URLSearchParams(location.search).get("q") || "";
if (SUBPATH[0] === "item") {
  const item = TASK.items.find((i) => String(i.id) === SUBPATH[1]);
  if (!item) mount(el("h1", {}, "No such product"), el("a", {href: href()}, "Back to search"));
  else mount(el("h1", {}, item.name), el("p", {}, `Price: $${item.price.toFixed(2)} (item #${item.id})`),
    el("button", {type: "button", onclick: () => finish({selected: item.id}, "Selected " + item.name)}, "Select this item"),
    el("p", {}, el("a", {href: href()}, "Back to search")));
} else {
  const box = el("input", {type: "search", name: "q", "aria-label": "Search products", value: query});
  const results = query ? TASK.items.filter((i) => i.name.toLowerCase().includes(query.toLowerCase())) : [];
  mount(el("h1", {}, "Product search"),
    el("form", {method: "get", action: href(), role: "search"}, box, el("button", {type: "submit"}, "Search")),
    query ? el("h2", {}, `${results.length} result(s) for "${query}"`) : null,
    el("ul", {}, results.map((i) => el("li", {}, el("a", {href: href("item", String(i.id))}, i.name)))));
}
