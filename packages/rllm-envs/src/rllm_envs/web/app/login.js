const user = el("input", {type: "text", "aria-label": "Username"});
const password = el("input", {type: "password", "aria-label": "Password"});
const error = el("p", {class: "error", role: "alert"});
let failures = 0;
mount(el("h1", {}, "Sign in"), form(() => {
  if (TASK.accounts[user.value] !== undefined && TASK.accounts[user.value] === password.value) {
    finish({logged_in: user.value}, "Welcome, " + user.value + "!");
  } else {
    failures += 1;
    report({failed_logins: failures});
    error.textContent = "Wrong username or password.";
  }
}, field("Username", user), field("Password", password), error,
  el("button", {type: "submit"}, "Log in")));
