const [section, topic] = SUBPATH;
const crumbs = el("nav", {"aria-label": "Breadcrumb"}, el("a", {href: href()}, "Home"),
  section ? el("a", {href: href(section)}, section) : null);
if (!section) {
  mount(crumbs, el("h1", {}, "Community site"), el("p", {}, "Choose a section."),
    el("ul", {}, Object.keys(TASK.tree).map((s) => el("li", {}, el("a", {href: href(s)}, s)))));
} else if (!TASK.tree[section]) {
  mount(crumbs, el("h1", {}, "Page not found"));
} else if (!topic) {
  mount(crumbs, el("h1", {}, `Section: ${section}`),
    el("ul", {}, TASK.tree[section].map((t) => el("li", {}, el("a", {href: href(section, t)}, t)))));
} else if (!TASK.tree[section].includes(topic)) {
  mount(crumbs, el("h1", {}, "Page not found"));
} else {
  mount(crumbs, el("h1", {}, `${topic} (${section})`), el("p", {}, `Articles and events about ${topic.toLowerCase()}.`),
    el("button", {type: "button", onclick: () => finish({bookmarked: `${section}/${topic}`}, "Bookmarked")}, "Bookmark this page"));
}
