const cart = stored("cart", {});
const count = () => Object.values(cart).reduce((a, b) => a + b, 0);
const cartLink = () => el("a", {href: href("checkout"), "aria-label": "View cart"}, `View cart (${count()})`);
if (SUBPATH[0] === "checkout") {
  const render = () => mount(el("h1", {}, "Your cart"),
    Object.keys(cart).length === 0 ? el("p", {}, "The cart is empty.") : el("table", {},
      el("tbody", {}, Object.entries(cart).map(([name, qty]) => el("tr", {}, el("td", {}, name), el("td", {}, `x ${qty}`),
        el("td", {}, el("button", {type: "button", class: "plain", onclick: () => { delete cart[name]; store("cart", cart); render(); }}, `Remove ${name}`)))))),
    el("button", {type: "button", onclick: () => {
      const order = {};
      for (const name of Object.keys(cart).sort()) order[name] = cart[name];
      finish({order}, "Order placed");
    }}, "Place order"), el("p", {}, el("a", {href: href()}, "Continue shopping")));
  render();
} else {
  const status = el("p", {role: "status"}, cartLink());
  mount(el("h1", {}, "Fruit shop"), status, el("table", {}, el("tbody", {}, TASK.products.map((p) => {
    const qty = el("input", {type: "number", min: 1, max: 99, value: 1, "aria-label": `Quantity of ${p.name}`});
    return el("tr", {}, el("td", {}, p.name), el("td", {}, `$${p.price.toFixed(2)}`), el("td", {}, qty),
      el("td", {}, el("button", {type: "button", onclick: () => {
        const n = Math.max(0, Math.floor(Number(qty.value) || 0));
        if (n > 0) { cart[p.name] = (cart[p.name] || 0) + n; store("cart", cart); }
        status.replaceChildren(cartLink());
      }}, `Add ${p.name} to cart`)));
  }))));
}
