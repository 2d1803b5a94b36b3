const volume = el("input", {type: "range", min: 0, max: 100, step: 5, value: TASK.start, "aria-label": "Volume"});
const shown = el("output", {}, String(TASK.start));
volume.addEventListener("input", () => { shown.textContent = volume.value; });
mount(el("h1", {}, "Sound"), form(() => finish({volume: Number(volume.value)}),
  field("Volume", volume), el("p", {}, "Current volume: ", shown), el("button", {type: "submit"}, "Apply")));
