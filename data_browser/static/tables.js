/* Sortable tables: a click on a header of a table.sortable sorts its body by that column, again to reverse.
   A cell's data-value (a number) sorts it; cells without one sort by text, empty ones last. */
"use strict";
document.querySelectorAll("table.sortable").forEach((table) => {
  const body = table.tBodies[0];
  table.querySelectorAll("thead th").forEach((th, col) => {
    if (th.classList.contains("nosort")) return;
    th.addEventListener("click", () => {
      const dir = th.dataset.dir === "asc" ? -1 : 1;
      table.querySelectorAll("thead th").forEach((h) => delete h.dataset.dir);
      th.dataset.dir = dir === 1 ? "asc" : "desc";
      const key = (row) => {
        const cell = row.cells[col];
        if (cell.dataset.value !== undefined) return cell.dataset.value === "" ? null : Number(cell.dataset.value);
        return cell.textContent.trim() || null;
      };
      const rows = [...body.rows].sort((a, b) => {
        const x = key(a), y = key(b);
        if (x === null || y === null) return (x === null) - (y === null);
        return (x < y ? -1 : x > y ? 1 : 0) * dir;
      });
      rows.forEach((row) => body.appendChild(row));
    });
  });
});
