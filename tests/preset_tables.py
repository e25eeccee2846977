"""The framework presets as plain tables, for tests that state them: {framework: {function: keywords}},
{framework: NOT_EXPRESSIBLE}, {framework: SCOPE} (only the frameworks read for some functions), read
from the framework homes (`conformance.records.presets`)."""

from conformance.records.presets import homes, presets

PRESETS = {name: {f: p.keywords for f, p in presets(name).items()} for name in homes()}
NOT_EXPRESSIBLE = {name: home.NOT_EXPRESSIBLE for name, home in homes().items()}
SCOPE = {name: home.SCOPE for name, home in homes().items() if home.SCOPE is not None}
