const name = el("input", {type: "text", "aria-label": "Name"});
const email = el("input", {type: "email", "aria-label": "Email"});
const subject = el("select", {"aria-label": "Subject"},
  el("option", {value: ""}, "Choose a subject"), TASK.subjects.map((s) => el("option", {}, s)));
const message = el("textarea", {"aria-label": "Message", rows: 3});
mount(el("h1", {}, "Contact us"), form(() => finish({submitted: {
  name: name.value, email: email.value, subject: subject.value, message: message.value}}),
  field("Name", name), field("Email", email), field("Subject", subject), field("Message", message),
  el("button", {type: "submit"}, "Send")));
