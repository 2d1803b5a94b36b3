const answers = {name: "", plan: null, seats: 1};
function stepOne() {
  const name = el("input", {type: "text", "aria-label": "Full name", value: answers.name});
  mount(el("h1", {}, "Sign up: step 1 of 3"), form(() => { answers.name = name.value; stepTwo(); },
    field("Full name", name), el("button", {type: "submit"}, "Next")));
}
function stepTwo() {
  const radios = TASK.plans.map((plan) => [plan, el("input", {type: "radio", name: "plan", "aria-label": plan, checked: answers.plan === plan})]);
  const seats = el("input", {type: "number", min: 1, max: 99, "aria-label": "Seats", value: answers.seats});
  mount(el("h1", {}, "Sign up: step 2 of 3"), form(() => {
    const chosen = radios.find(([, radio]) => radio.checked);
    answers.plan = chosen ? chosen[0] : null;
    answers.seats = Number(seats.value);
    stepThree();
  }, el("fieldset", {}, el("legend", {}, "Plan"), radios.map(([plan, radio]) => el("label", {}, radio, " " + plan))),
    field("Seats", seats),
    el("button", {type: "button", class: "plain", onclick: stepOne}, "Back"), el("button", {type: "submit"}, "Next")));
}
function stepThree() {
  const terms = el("input", {type: "checkbox", "aria-label": "I accept the terms"});
  const error = el("p", {class: "error", role: "alert"});
  mount(el("h1", {}, "Sign up: step 3 of 3"),
    el("p", {}, `${answers.name}, plan ${answers.plan}, ${answers.seats} seat(s).`),
    form(() => {
      if (!terms.checked) { error.textContent = "Please accept the terms."; return; }
      finish({signup: answers}, "Welcome aboard!");
    }, el("label", {}, terms, " I accept the terms"), error,
      el("button", {type: "button", class: "plain", onclick: stepTwo}, "Back"), el("button", {type: "submit"}, "Finish")));
}
stepOne();
