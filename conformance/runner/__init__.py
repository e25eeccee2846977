"""The conformance runner: adapters checked against the records, one public entry point.

    from conformance.records import RECORDS
    from conformance.runner import RunOptions, run

    report = run(["refimpl", "mypkg.rlspec_adapter:Adapter"], RECORDS, RunOptions(seed=0))

`run` (`conformance.runner.run`) is what `rlspec check`, `rlspec reports`, `rlspec mutants`, the pytest
plugin, the site and the README generator call. Its pieces, lowest first:

- `protocol`: the adapter boundary (`Adapter`, `LoadedAdapter`, the only reader of adapter attributes);
  `loading` / `builtin` / `discovery`: finding adapters by name, rlspec's own two, the framework homes;
- `compare`, `differential`: one case through an adapter against the oracle; `invariants`: the adapter
  against itself on transformed inputs; `verdict`: one row's verdict (`check_row`); `composite`: a
  framework result that is a composition of quantities; `partition`: the micro-batch split rows;
- `diagnosis`: the known bugs (mutants) a failing row is consistent with;
- `parts`, `isolation`, `run`: the rows of a run, in process or in a worker process; `report`: the report
  and its terminal, JSON, JUnit and Markdown forms.
"""

from conformance.runner.options import PARTS, RunOptions
from conformance.runner.protocol import Adapter, LoadedAdapter
from conformance.runner.report import Report
from conformance.runner.rows import RowResult
from conformance.runner.run import load_adapters, run, select_records

__all__ = ["PARTS", "RunOptions", "Adapter", "LoadedAdapter", "Report", "RowResult", "load_adapters", "run",
           "select_records"]
