/* The experiment DAG fits the page width by default (scaled down, never up); the zoom buttons show it larger
   inside its own scrolling box (#dag), so a 200-step DAG never widens the page and every node stays reachable. */
"use strict";
(() => {
  const box = document.getElementById("dag"), svg = box && box.querySelector("svg");
  if (!svg) return;
  const natural = Number(svg.getAttribute("width"));
  let scale = null; // null: fit the width
  const apply = () => {
    box.classList.toggle("fit", scale === null);
    svg.style.width = scale === null ? "" : natural * scale + "px";
    document.getElementById("dag-scale").textContent =
      scale === null ? "fit" : Math.round(scale * 100) + "%";
  };
  const fitted = () => Math.min(1, box.clientWidth / natural);
  document.querySelectorAll("#dag-tools button").forEach((b) =>
    b.addEventListener("click", () => {
      const z = b.dataset.zoom, now = scale === null ? fitted() : scale;
      scale = z === "fit" ? null : z === "in" ? Math.min(2, now * 1.5) : z === "out" ? Math.max(0.1, now / 1.5) : Number(z);
      apply();
    })
  );
  apply();
})();
