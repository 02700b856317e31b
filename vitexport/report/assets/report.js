// vitexport report: sorting and filtering of the tables, which read without this script too.
(function () {
  "use strict";

  function sortKey(cell) {
    var raw = cell.getAttribute("data-sort");
    if (raw === null) raw = cell.textContent;
    var num = raw === "" ? NaN : Number(raw);
    return { empty: raw === "", num: num, text: raw };
  }

  function compare(a, b) {
    if (a.empty || b.empty) return a.empty === b.empty ? 0 : a.empty ? 1 : -1; // empty cells last
    if (!isNaN(a.num) && !isNaN(b.num)) return a.num - b.num;
    return a.text.localeCompare(b.text, undefined, { numeric: true });
  }

  function sortBy(table, th) {
    var headers = Array.prototype.slice.call(th.parentNode.children);
    var index = headers.indexOf(th);
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    headers.forEach(function (h) { h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r1, r2) {
      var order = compare(sortKey(r1.cells[index]), sortKey(r2.cells[index]));
      return ascending ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  function tablesOf(kind) {
    return Array.prototype.slice.call(document.querySelectorAll("table." + kind));
  }

  function rowsOf(kind) {
    var rows = [];
    tablesOf(kind).forEach(function (t) { rows = rows.concat(Array.prototype.slice.call(t.tBodies[0].rows)); });
    return rows;
  }

  function applyFilters(form) {
    var kind = form.getAttribute("data-table");
    var wanted = {};
    form.querySelectorAll("select").forEach(function (s) { wanted[s.getAttribute("data-filter")] = s.value; });
    var rows = rowsOf(kind), shown = 0;
    rows.forEach(function (row) {
      var keep = Object.keys(wanted).every(function (f) {
        return !wanted[f] || row.getAttribute("data-" + f) === wanted[f];
      });
      row.hidden = !keep;
      if (keep) shown += 1;
    });
    var out = form.querySelector("output");
    if (out) out.textContent = shown + " of " + rows.length + " rows shown";
  }

  function setUpFilters(form) {
    var rows = rowsOf(form.getAttribute("data-table"));
    form.querySelectorAll("select").forEach(function (select) {
      var field = select.getAttribute("data-filter"), seen = {};
      rows.forEach(function (row) {
        var value = row.getAttribute("data-" + field);
        if (value && !seen[value]) {
          seen[value] = true;
          var option = document.createElement("option");
          option.value = value;
          option.textContent = value;
          select.appendChild(option);
        }
      });
      select.addEventListener("change", function () { applyFilters(form); });
    });
    applyFilters(form);
  }

  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (th) {
      var button = th.querySelector("button");
      if (button) button.addEventListener("click", function () { sortBy(table, th); });
    });
  });
  document.querySelectorAll("form.filters").forEach(setUpFilters);
})();
