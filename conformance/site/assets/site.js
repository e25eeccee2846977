// rlspec conformance site: filter the rows of the matrix and framework tables (no network, no libraries).
(function () {
  "use strict";
  var text = document.getElementById("row-filter");
  var findings = document.getElementById("only-findings");
  if (!text || !findings) {
    return;
  }
  var FINDING = /(^| )s-(fail|error)( |$)/;
  function hasFinding(tr) {
    var cells = tr.querySelectorAll("td.cell");
    for (var i = 0; i < cells.length; i++) {
      if (FINDING.test(cells[i].className) || cells[i].querySelector(".marks") && /precision/.test(cells[i].querySelector(".marks").textContent)) {
        return true;
      }
    }
    return false;
  }
  function apply() {
    var needle = text.value.trim().toLowerCase();
    var rows = document.querySelectorAll("table.filterable tr.quantity");
    for (var i = 0; i < rows.length; i++) {
      var tr = rows[i];
      var show = (!needle || tr.textContent.toLowerCase().indexOf(needle) >= 0) && (!findings.checked || hasFinding(tr));
      tr.classList.toggle("hidden", !show);
    }
    var groups = document.querySelectorAll("table.filterable tbody.family");
    for (var j = 0; j < groups.length; j++) {
      var visible = groups[j].querySelectorAll("tr.quantity:not(.hidden)").length > 0;
      groups[j].querySelector("tr.family-row").classList.toggle("hidden", !visible);
    }
  }
  text.addEventListener("input", apply);
  findings.addEventListener("change", apply);
})();
