const paragraphs = TASK.companies.map((c) =>
  el("p", {}, `${c.name} was founded in ${c.city} in ${c.year} by ${c.founder}. ` +
    `Today the company is best known for its ${c.product}.`));
mount(el("article", {}, el("h1", {}, "Founders of the century"),
  el("p", {}, "A short history of four companies and the people who started them."), paragraphs));
