"""The conformance site (`rlspec site DIR`) and the HTML report of one run (`rlspec check --html`).

- `matrix.py`: the matrix, its cells and their details, from report JSON; `report_page` is the
  single-file page of one run;
- `build.py`: the static site of the committed reports, spec, mutants, bench tables and plots;
- `markdown_html.py`: the small Markdown converter the spec pages use;
- `browser.py`: headless Chromium (selenium) for the browser test and `rlspec site --screenshot`;
- `assets/`: the stylesheet and the row filter, copied into the site (inlined in a single page).
"""

from conformance.site.build import build_site
from conformance.site.matrix import report_page

__all__ = ["build_site", "report_page"]
