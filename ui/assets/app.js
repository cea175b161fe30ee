// Placeholder page (h30b writes the real one): lists the sessions.
"use strict";
fetch("/api/sessions", {credentials: "same-origin"}).then(r => r.json()).then(d => {
  const list = document.getElementById("sessions");
  for (const s of d.sessions) {
    const row = document.createElement("div");
    row.dataset.session = s.id;
    row.textContent = s.id + " " + (s.agent || "") + " " + s.events + " events";
    list.appendChild(row);
  }
});
